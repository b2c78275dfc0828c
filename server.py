"""Entry point: `python server.py --model_path … --ip … --port …` (see README.md)."""

import sys

from vita.cli import main

if __name__ == "__main__":  # vLLM and the workers start with spawn: keep the guard
    sys.exit(main())
