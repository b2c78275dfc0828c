"""MCP tools from a real MCP server process (tests/data/inventory_mcp_server.py, built with the `mcp` package):
listed, called, slow, dying, and a server that cannot start reported while the others work."""

from __future__ import annotations

import asyncio
import sys

from tests.harness.server import ROOT
from workers.tools.mcp_tools import McpServers
from workers.tools.registry import ToolBox, ToolCall

SERVER = str(ROOT / "tests" / "data" / "inventory_mcp_server.py")


def test_a_servers_tools_are_called_and_its_faults_are_errors_the_model_reads():
    async def scenario() -> None:
        servers = McpServers([{"name": "inventory", "command": sys.executable, "args": [SERVER],
                               "env": {"INVENTORY_SLOW_S": "3", "INVENTORY_TEST_TOOLS": "1"}},
                              {"name": "missing", "command": "/nonexistent/mcp-server"}], timeout_s=1.0)
        await servers.start()
        try:
            names = sorted(t.name for t in servers.tools())
            assert names == ["crash", "opening_hours", "slow_lookup", "stock_count"]
            assert list(servers.failed()) == ["missing"] and servers.failed()["missing"]
            box = ToolBox(servers.tools())
            got = await box.call(ToolCall("stock_count", {"item": "widgets"}))
            assert got.ok and got.result == "42 widgets in stock."
            assert (await box.call(ToolCall("stock_count", {}))).outcome == "bad_arguments"  # the server's schema
            slow = await box.call(ToolCall("slow_lookup", {"item": "x"}))
            assert slow.outcome == "timeout" and slow.duration_s < 2.0
            dead = await box.call(ToolCall("crash", {"reason": "test"}))
            assert not dead.ok and dead.outcome in ("failed", "timeout")
            after = await box.call(ToolCall("stock_count", {"item": "gadgets"}))
            assert not after.ok and "inventory" in after.result  # the server is gone: said, not hung
        finally:
            await servers.aclose()

    asyncio.run(scenario())
