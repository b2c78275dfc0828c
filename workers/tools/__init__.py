"""Tools the model may call during a turn: the registry and its calls (registry.py), the built-in tools
(builtin.py) and tools served by MCP servers from the config (mcp_tools.py)."""
