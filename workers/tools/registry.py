"""The tools a session may call, and one call from the model's text to a result the model can read.

A tool is a name, a description, a JSON schema for its arguments and a function (sync or async) with a timeout.
The model asks for one in its chat template's format (Qwen2.5: ``<tool_call>{"name": …, "arguments": …}
</tool_call>``); whatever goes wrong — JSON that does not parse, an unknown tool, arguments that do not fit the
schema, a tool that raises or takes too long — becomes a short error text the model reads and can recover from,
never an exception out of the turn.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

# A call in Qwen2.5's tags; a small model sometimes writes it in the tags of the results it was shown in its history
# (<tool_response>{"name": "opening_hours", ...}</tool_response>, scripts/eval/tools.py): a call all the same.
TOOL_CALL = re.compile(r"<(tool_call|tool_response)>\s*(.*?)\s*(?:</\1>|$)", re.S)
OPENING = "<tool_call>"
OPENINGS = (OPENING, "<tool_response>")
RESULT_CHARS = 1500  # a result longer than this is cut before it reaches the prompt
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    function: Callable[..., Any]  # called with the arguments as keywords; may be async
    timeout_s: float = DEFAULT_TIMEOUT_S
    source: str = "builtin"  # or "mcp:<server>"
    read_only: bool = True  # changes nothing (MCP: the tool's readOnlyHint): may run in a speculative turn
    check: dict[str, Any] | None = None  # what arguments are checked against, where not `parameters` (a client's)

    def schema(self) -> dict[str, Any]:
        """As chat templates and OpenAI-compatible servers take it."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolCall:
    """What the model asked for (name and arguments as it wrote them), or why its request could not be read."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True)
class ToolOutcome:
    name: str
    arguments: dict[str, Any]
    result: str  # what the model reads: the result, or "Error: …"
    ok: bool
    duration_s: float
    outcome: str  # ok, bad_call, unknown_tool, bad_arguments, failed, timeout

    def as_message(self) -> dict[str, Any]:
        return {"role": "tool", "name": self.name, "content": self.result}


BARE_OPENING = '{"name"'  # small models often write the call's JSON without the tags
FENCES = ("```json", "```", "json")  # ...or in a Markdown code block


def _unfenced(text: str) -> str:
    """The text without a leading Markdown fence; a prefix of one reads as empty (too early to tell)."""
    head = text.lstrip()
    for fence in FENCES:
        if head.startswith(fence):
            return head[len(fence):].lstrip()
        if fence.startswith(head):
            return ""
    return head


def starts_tool_call(text: str) -> bool | None:
    """True: the reply is a tool call; False: it is not; None: too early to tell (a prefix of the opening tag, or
    of a bare JSON call: no spoken reply begins with a brace)."""
    head = _unfenced(text)
    compact = head.replace(" ", "").replace("\n", "")
    if compact.startswith("{{"):  # '{{"name": ...}}': Qwen's template shows the call with doubled braces
        compact = compact.lstrip("{") and "{" + compact.lstrip("{")
    if head.startswith(OPENINGS) or compact.startswith(BARE_OPENING):
        return True
    return None if any(o.startswith(head) for o in OPENINGS) or BARE_OPENING.startswith(compact) else False


def _bare_calls(text: str) -> list[str]:
    """The JSON objects written one after another without tags: '{"name": ...} {"name": ...}'."""
    bodies, decoder, at = [], json.JSONDecoder(), 0
    text = text.strip()
    while at < len(text):
        while text.startswith("{{", at):  # '{{"name": ...}}}', as Qwen's template writes its example
            at += 1
        try:
            _, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            bodies.append(text[at:])  # reported as not valid JSON below
            break
        bodies.append(text[at:end])
        at = end
        while at < len(text) and text[at] in " \n\t,}":
            at += 1
    return bodies


def parse_calls(text: str) -> list[ToolCall]:
    """Every <tool_call> block of the model's text, in order (an unclosed last one too: generation may stop), or
    the bare JSON calls of a model that leaves the tags out."""
    calls = []
    tagged = TOOL_CALL.findall(text)
    # <tool_response> bodies are calls only in a reply with no <tool_call>: after a real call, a result the model
    # made up in those tags is not another call.
    calls_tagged = [body for tag, body in tagged if tag == "tool_call"]
    bodies = calls_tagged or [body for _, body in tagged] or _bare_calls(_unfenced(text).replace("```", " "))
    for body in bodies:
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            calls.append(ToolCall("", error=f"the tool call is not valid JSON ({exc.msg})"))
            continue
        except RecursionError:  # nested a thousand deep: only this turn's call fails
            calls.append(ToolCall("", error="the tool call is nested too deeply"))
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            calls.append(ToolCall("", error='a tool call needs {"name": ..., "arguments": {...}}'))
            continue
        arguments = data.get("arguments", {})
        if isinstance(arguments, str):  # some models write the arguments as a JSON string
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (json.JSONDecodeError, RecursionError):
                arguments = None
        if not isinstance(arguments, dict):
            calls.append(ToolCall(data["name"], error="the arguments must be a JSON object"))
            continue
        calls.append(ToolCall(data["name"], arguments))
    return calls


class ToolBox:
    """The tools of one session (the built-ins and the operator's, narrowed by the client if it asked)."""

    def __init__(self, tools: list[Tool]):
        self.tools = {t.name: t for t in tools}

    def __bool__(self) -> bool:
        return bool(self.tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]

    def only(self, names: list[str] | None, read_only: bool = False) -> ToolBox:
        """The tools named (None: all); with read_only, only those that change nothing: a speculative turn may be
        discarded, so it must not act."""
        return ToolBox([t for n, t in self.tools.items()
                        if (names is None or n in names) and (t.read_only or not read_only)])

    async def call(self, request: ToolCall, context: dict[str, Any] | None = None) -> ToolOutcome:
        started = time.monotonic()

        def outcome(result: str, kind: str) -> ToolOutcome:
            ok = kind == "ok"
            text = result if ok else f"Error: {result}"
            if len(text) > RESULT_CHARS:
                text = text[:RESULT_CHARS] + " …(cut)"
            return ToolOutcome(request.name, request.arguments, text, ok, time.monotonic() - started, kind)

        if request.error:
            return outcome(request.error, "bad_call")
        tool = self.tools.get(request.name)
        if tool is None:
            return outcome(f"there is no tool named {request.name!r}; the tools are: {', '.join(self.tools)}",
                           "unknown_tool")
        try:
            jsonschema.validate(request.arguments, tool.parameters if tool.check is None else tool.check)
        except jsonschema.ValidationError as exc:
            return outcome(f"bad arguments for {tool.name}: {exc.message}", "bad_arguments")
        except jsonschema.exceptions.SchemaError as exc:  # the tool's own schema is broken (an MCP server's)
            return outcome(f"{tool.name} cannot be called: its argument schema is invalid ({exc.message})", "failed")
        except Exception as exc:  # e.g. a $ref that resolves nowhere
            return outcome(f"{tool.name} cannot be called: {exc}", "failed")
        kwargs = dict(request.arguments)
        if context and "context" in inspect.signature(tool.function).parameters:
            kwargs["context"] = context
        try:
            if inspect.iscoroutinefunction(tool.function):
                result = await asyncio.wait_for(tool.function(**kwargs), tool.timeout_s)
            else:
                result = await asyncio.wait_for(asyncio.to_thread(tool.function, **kwargs), tool.timeout_s)
        except TimeoutError:
            return outcome(f"{tool.name} did not answer within {tool.timeout_s:g} s", "timeout")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the tool's own failure is the model's to explain, not the turn's to die of
            return outcome(f"{tool.name} failed: {exc}", "failed")
        return outcome(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False), "ok")
