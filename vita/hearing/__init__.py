"""A session's hearing: Silero VAD and the voice gate that tells the user's voice from the room's and the reply's
echo, the server-side echo canceller, and the end-of-turn model. Pure audio analysis, per session; what it hears
becomes turn events in vita/turns/ (listener.py)."""
