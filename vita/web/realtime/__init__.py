"""OpenAI's Realtime door: over a WebSocket, and over WebRTC (a call)."""
