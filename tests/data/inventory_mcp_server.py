"""A small MCP server for the tests and the tool evaluation: a shop's stock and opening hours, which the model
cannot know by itself. Run: python tests/data/inventory_mcp_server.py (stdio)."""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

STOCK = {"widget": 42, "gadget": 7, "sprocket": 0, "gizmo": 315}
server = MCPServer("inventory")
LOOKUP = ToolAnnotations(read_only_hint=True)  # changes nothing: may run in a speculative turn


@server.tool(annotations=LOOKUP)
def stock_count(item: str) -> str:
    """How many of an item the shop has in stock (widgets, gadgets, sprockets, gizmos)."""
    name = item.strip().lower().rstrip("s")
    if name not in STOCK:
        return f"The shop does not sell {item}."
    return f"{STOCK[name]} {name}s in stock."


@server.tool(annotations=LOOKUP)
def opening_hours(day: str) -> str:
    """The shop's opening hours on a day of the week."""
    return "Closed." if day.strip().lower() == "sunday" else "9 am to 6 pm."


def slow_lookup(item: str) -> str:
    """Where an item is kept in the shop (a lookup that takes a while)."""
    time.sleep(float(os.environ.get("INVENTORY_SLOW_S", "2")))
    return f"{item}: aisle 4, after a while."


def crash(reason: str) -> str:
    """Ends the server at once (the tests' dying server)."""
    os._exit(3)


if os.environ.get("INVENTORY_TEST_TOOLS"):  # the fault tests' tools, not offered to a model being evaluated
    server.tool()(slow_lookup)
    server.tool()(crash)


if __name__ == "__main__":
    server.run()
