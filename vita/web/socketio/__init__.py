"""The Socket.IO door: VITA's page and our own, over Flask-SocketIO (threading mode)."""
