"""Entry point: `python server.py --model_path … --ip … --port …` (see README.md).

The composition root: the front (vita/) runs these worker processes (workers/); vita/ never imports workers/.
"""

import sys

from vita.cli import main
from vita.process_graph import WorkerSpec
from workers.llm.worker import run_llm_worker
from workers.tts.worker import run_tts_worker

# liveness_s: a ready worker that sends no heartbeat for this long is stuck, and is killed and restarted.
WORKERS = (WorkerSpec("llm", run_llm_worker, "requests", liveness_s=30.0),
           WorkerSpec("tts", run_tts_worker, "tts", daemon=True, liveness_s=10.0))

if __name__ == "__main__":  # vLLM and the workers start with spawn: keep the guard
    sys.exit(main(WORKERS))
