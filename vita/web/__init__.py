"""The front's doors: HTTPS and Socket.IO (and their guards), TLS, access, WebRTC, and the wire formats of what
clients send."""
