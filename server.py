"""Entry point: `python server.py --model_path … --ip … --port …` (see README.md).

The composition root: the front (vita/) runs these worker processes (workers/); vita/ never imports workers/.
"""

import sys

from vita.cli import main
from vita.process_graph import WorkerSpec
from workers.llm_worker import run_llm_worker
from workers.tts_worker import run_tts_worker

WORKERS = (WorkerSpec("llm", run_llm_worker, "requests"), WorkerSpec("tts", run_tts_worker, "tts", daemon=True))

if __name__ == "__main__":  # vLLM and the workers start with spawn: keep the guard
    sys.exit(main(WORKERS))
