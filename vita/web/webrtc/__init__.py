"""WebRTC, the media carrier of our page's door and of Realtime calls."""
