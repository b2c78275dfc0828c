"""The LLM worker process: hearing (ASR), prompting, generation on an engine, tools in a turn, and the reply
cut into speakable pieces."""
