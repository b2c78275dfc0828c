"""The built-in tools: the current date and time, and exact arithmetic. A 1.5B model multiplies 347 by 29 wrong
and does not know what day it is; these answer instead of it."""

from __future__ import annotations

import asyncio
import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from workers.tools.arithmetic import ToolInputError, calculate
from workers.tools.isolated import IsolatedCalls
from workers.tools.registry import Tool

__all__ = ["ToolInputError", "builtin_tools", "calculate", "current_time", "isolated_arithmetic"]

CALCULATE_TIMEOUT_S = 1.0


def isolated_arithmetic() -> IsolatedCalls:
    """The process `calculate` runs in (its owner starts and closes it)."""
    return IsolatedCalls(["workers.tools.arithmetic:calculate"])


def current_time(timezone: str | None = None, default_zone: str | None = None,
                 now: dt.datetime | None = None) -> str:
    """The date, day of the week and time in `timezone` (an IANA name such as "Europe/Paris"), else in the user's
    zone (`default_zone`, from their page), else the server's."""
    zone_name = (timezone or default_zone or "").strip()
    moment = now or dt.datetime.now(dt.UTC)
    if zone_name:
        try:
            zone = ZoneInfo(zone_name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ToolInputError(f"unknown time zone {zone_name!r}; use an IANA name such as Europe/Paris") from None
        local = moment.astimezone(zone)
        place = f" in {zone_name.rsplit('/', 1)[-1].replace('_', ' ')}" if timezone else ""
    else:
        local = moment.astimezone()
        place = ""
    clock = f"{local.hour % 12 or 12}:{local.minute:02d} {'AM' if local.hour < 12 else 'PM'}"
    return f"{local:%A, %B} {local.day}, {local.year}, {clock}{place}"


def builtin_tools(arithmetic: IsolatedCalls | None = None) -> list[Tool]:
    """The built-ins; `calculate` runs in `arithmetic`'s process when given (the worker's case: nothing it computes
    can hold the worker's GIL), else in a thread (a caller that runs one sum at a time)."""
    if arithmetic is not None:
        async def calculate_tool(expression: str) -> str:
            return await asyncio.to_thread(arithmetic.call, "calculate", {"expression": expression},
                                           CALCULATE_TIMEOUT_S)
    else:
        calculate_tool = calculate
    return [
        Tool("get_current_time",
             "The current date, day of the week and time. Use it for any question about today, the date, the day "
             "of the week or the time.",
             {"type": "object", "additionalProperties": False,
              "properties": {"timezone": {"type": "string",
                                          "description": "an IANA time zone such as Europe/Paris, only when the "
                                                         "user names a place; omit it for the user's own time"}}},
             _time_tool, timeout_s=1.0),
        Tool("calculate",
             "Exact arithmetic: + - * / ** and parentheses. Use it for every calculation.",
             {"type": "object", "additionalProperties": False, "required": ["expression"],
              "properties": {"expression": {"type": "string", "description": "for example 347 * 29"}}},
             calculate_tool, timeout_s=CALCULATE_TIMEOUT_S + 0.25),
    ]


def _time_tool(timezone: str | None = None, context: dict | None = None) -> str:
    return current_time(timezone, (context or {}).get("timezone"))
