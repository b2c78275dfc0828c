"""The models the LLM worker runs: the engine that generates (vLLM in process, or a remote OpenAI-compatible server,
behind one contract: generation.py) and Whisper, which hears a turn for a text-only model."""
