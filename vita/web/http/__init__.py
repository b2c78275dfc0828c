"""The front's HTTP layer: the server and its guards, the page's files, TLS, the access token."""
