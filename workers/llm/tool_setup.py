"""The tools a turn may call: the built-ins (arithmetic in a process of its own) and the operator's MCP servers'
tools, for a model that renders its own chat template. A remote server or a transcript-style model gets none
(noted in /health)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from vita.config import ToolsConfig
from vita.messages import WorkerState
from workers.common import StatusReporter
from workers.tools.builtin import builtin_tools, isolated_arithmetic
from workers.tools.isolated import IsolatedCalls
from workers.tools.mcp_tools import McpServers
from workers.tools.registry import ToolBox


@dataclass
class StartedTools:
    toolbox: ToolBox
    arithmetic: IsolatedCalls | None = None  # the process `calculate` runs in: closed with the worker
    mcp: McpServers | None = None


async def start_tools(cfg: ToolsConfig, report: StatusReporter) -> StartedTools:
    """What fails half-way leaves nothing running: the processes started so far are closed before it is raised."""
    started = StartedTools(ToolBox([]))
    try:
        if cfg.builtin:
            started.arithmetic = isolated_arithmetic()
            await asyncio.to_thread(started.arithmetic.start)
        tools = builtin_tools(started.arithmetic) if cfg.builtin else []
        if cfg.mcp_servers:
            report(WorkerState.LOADING, f"starting {len(cfg.mcp_servers)} MCP server(s)")
            started.mcp = McpServers(cfg.mcp_servers, cfg.timeout_s)
            await started.mcp.start()
            names = {t.name for t in tools}
            for tool in started.mcp.tools():
                if tool.name in names:
                    report.log.warning("MCP tool %r (%s) hidden by a tool of the same name", tool.name, tool.source)
                    continue
                tools.append(tool)
                names.add(tool.name)
    except BaseException:
        if started.mcp is not None:
            await started.mcp.aclose()
        if started.arithmetic is not None:
            started.arithmetic.close()
        raise
    started.toolbox = ToolBox(tools)
    return started
