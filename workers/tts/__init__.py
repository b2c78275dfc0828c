"""The TTS worker process: a reply's pieces spoken in the session's voice, streamed as 24 kHz chunks."""
