"""Drive a live server as its clients do: start and stop it, a recording Socket.IO client, spoken audio and
one paced microphone, a WebRTC peer. Used by the tests and the benchmark scripts alike (the test tools are
needed: python-socketio's client, aiortc)."""
