"""One stage at a time, without the rest of the server: Whisper, the LLM's prefill and decode, Piper, the front's
audio path, the echo canceller, what a picture costs (`python -m scripts.bench.stages.NAME`)."""
