"""Tools inside a spoken turn: telling a tool call from a spoken reply as the tokens stream, and the lines said
around calls (a filler while a slow one runs, an apology when nothing came of them)."""

from __future__ import annotations

from workers.tools.registry import OPENINGS, starts_tool_call


class CallDetector:
    """Watches a reply as it streams: one that begins with a tool call is held back whole (never spoken nor shown),
    anything else flows through at once; a tool call written after spoken words is cut off (`cut`)."""

    def __init__(self, enabled: bool):
        self.state: bool | None = None if enabled else False  # None: too early to tell; True: a tool call
        self.pending = ""
        self.cut = False
        self.tail = ""  # the end of what was spoken: an opening tag split across two deltas is still seen

    @property
    def is_call(self) -> bool:
        return self.state is True

    def feed(self, text: str) -> str:
        """The text to speak and show now."""
        if self.state is False:
            return self._speakable(text)
        self.pending += text
        if self.state is None:
            self.state = starts_tool_call(self.pending)
            if self.state is False:
                return self._release()
        return ""

    def finish(self) -> str:
        """The stream ended: text still held because it might have begun a tool call was text after all."""
        if self.state is None:
            self.state = False
            return self._release()
        return ""

    def _release(self) -> str:
        text, self.pending = self.pending, ""
        return self._speakable(text)

    def _speakable(self, text: str) -> str:
        seen = self.tail + text
        at = min((seen.index(o[:-1]) for o in OPENINGS if o[:-1] in seen), default=-1)
        if at >= 0:  # "<tool_call": the model wants a tool after all, too late to hold the reply
            self.cut = True
            return text[:max(0, at - len(self.tail))]
        self.tail = seen[-max(len(o) for o in OPENINGS):]
        return text
