"""Tools from the operator's MCP servers (config `tools.mcp_servers`), through the `mcp` package's client.

Each server gets one task of its own in the LLM worker's event loop that opens its transport (a stdio process or
a streamable-HTTP URL) and its session, lists its tools and holds them open until the worker stops: the
transport's task groups are entered and left in that one task. Calls are made from the turns' own tasks (the
session takes concurrent requests), so a slow call holds up no other, and a barge-in cancels its own. A server
that fails to start is reported (`failed`, shown in /health) and the others work; one that dies later fails its
calls with a readable error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from workers.tools.registry import Tool

log = logging.getLogger("vita.tools")
CONNECT_TIMEOUT_S = 20.0


@dataclass
class McpServer:
    spec: dict[str, Any]
    timeout_s: float
    tools: list[Tool] = field(default_factory=list)
    error: str = ""
    session: Any = None
    task: asyncio.Task | None = None
    alive: bool = False

    @property
    def name(self) -> str:
        return self.spec["name"]

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        if not self.alive or self.session is None:
            raise RuntimeError(f"the MCP server {self.name!r} is not running ({self.error or 'stopped'})")
        try:
            result = await self.session.call_tool(tool, arguments, read_timeout_seconds=self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise RuntimeError(f"the MCP server {self.name!r}: {_describe(exc)}") from None
        text = " ".join(getattr(c, "text", "") for c in result.content).strip()
        if getattr(result, "is_error", False):
            raise RuntimeError(text or "the tool reported an error")
        return text or "(no text)"

    async def run(self, ready: asyncio.Future) -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client

        try:
            async with contextlib.AsyncExitStack() as stack:
                if "command" in self.spec:
                    # Only the operator's env over the package's safe default: never this server's secrets
                    # (VITA_ACCESS_TOKEN, an API key) to every tool process.
                    params = StdioServerParameters(command=self.spec["command"], args=self.spec.get("args", []),
                                                   env=self.spec.get("env") or None)
                    read, write = await stack.enter_async_context(stdio_client(params))
                else:
                    streams = await stack.enter_async_context(streamable_http_client(self.spec["url"]))
                    read, write = streams[0], streams[1]
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                listed = await session.list_tools()
                self.tools = [tool for t in listed.tools if (tool := self._tool(t)) is not None]
                self.session, self.alive = session, True
                ready.set_result(None)
                await asyncio.Event().wait()  # held open until the worker stops (this task is cancelled)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 — a server's failure (or its ExceptionGroup) is its own
            self.error = _describe(exc)
            log.warning("MCP server %r: %s", self.name, self.error)
        finally:
            self.alive, self.session = False, None
            if not ready.done():
                ready.set_exception(RuntimeError(self.error or "stopped"))

    def _tool(self, listed: Any) -> Tool | None:
        schema = getattr(listed, "input_schema", None) or getattr(listed, "inputSchema", None) or {"type": "object"}
        schema = {k: v for k, v in schema.items() if k != "title"}
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            log.warning("MCP server %r: tool %r left out: its argument schema is invalid (%s)", self.name,
                        listed.name, exc.message)
            return None
        hints = getattr(listed, "annotations", None)
        read_only = bool(getattr(hints, "read_only_hint", None) or getattr(hints, "readOnlyHint", None))

        async def call(**arguments: Any) -> str:
            return await self.call(listed.name, arguments)

        return Tool(listed.name, (listed.description or "").strip(), schema, call, timeout_s=self.timeout_s,
                    source=f"mcp:{self.name}", read_only=read_only)


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class McpServers:
    """The operator's MCP servers for the LLM worker's life."""

    def __init__(self, specs: list[dict[str, Any]], timeout_s: float):
        self.servers = [McpServer(spec, timeout_s) for spec in specs]

    async def start(self, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        """Start every server at once; those not ready within connect_timeout_s are given up."""
        waits = {}
        for server in self.servers:
            ready: asyncio.Future = asyncio.get_running_loop().create_future()
            server.task = asyncio.create_task(server.run(ready), name=f"mcp-{server.name}")
            waits[ready] = server
        if waits:
            await asyncio.wait(waits, timeout=connect_timeout_s)
        for ready, server in waits.items():
            if not ready.done():
                server.error = f"did not start within {connect_timeout_s:g} s"
                server.task.cancel()
            elif ready.exception() is not None:  # (retrieved: no "never retrieved" warning)
                server.error = server.error or _describe(ready.exception())

    def tools(self) -> list[Tool]:
        return [tool for server in self.servers if server.alive for tool in server.tools]

    def failed(self) -> dict[str, str]:
        return {s.name: s.error for s in self.servers if not s.alive}

    async def aclose(self) -> None:
        for server in self.servers:
            if server.task is not None:
                server.task.cancel()
        for server in self.servers:
            if server.task is not None:
                with contextlib.suppress(BaseException):
                    await server.task
