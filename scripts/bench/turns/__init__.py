"""The turn-taking benchmark (`python -m scripts.bench.turns`): when a turn is taken, and what stops a reply."""
