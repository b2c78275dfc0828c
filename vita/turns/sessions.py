"""Per-connection session state and the registry that enforces --max_users.

All of a session's state lives on its Session object; the registry is owned by the app, not the module.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from vita.capacity import MOST_TEXT_CHARS_S, SEATS_BEFORE_MEASURED, seats_for, text_chars_per_s
from vita.client_events import Channel
from vita.messages import MeasuredSpeed, ReplyText
from vita.rate_budget import RateBudget
from vita.turns.camera import FrameBuffer
from vita.turns.turn_taking import TurnTaking

if TYPE_CHECKING:
    from vita.ops.session_trace import SessionTrace
    from vita.turns.listener import SpeechListener
    from vita.turns.reply_sinks import ReplyOutput
    from vita.turns.session_actor import SessionActor

log = logging.getLogger(__name__)

MIN_TEXT_COST = 200  # characters a typed message costs against the session's text budget, however short
OWED_KEPT = 4096  # addresses whose text budget is remembered after their session closed (the oldest forgotten)
TEXT_BURST_CHARS = 4000.0
# Refused events a client may go on drawing, a second, once its burst (limits.max_refused_events) is spent. A
# person's page draws a few (a paste too many, late ICE candidates); a client that ignores its errors draws its
# whole event rate.
REFUSED_PER_S = 20.0
# Camera and image megapixels a second (after a burst): a camera at 2 fps is 0.5 (our page's 640x384) to 4.2
# (1920x1080); a Realtime message's four images of 12 MP at most fit the burst.
IMAGE_MP_PER_S, IMAGE_BURST_MP = 5.0, 48.0

@dataclass
class Session:
    """One connection: its settings, camera frames, and its turn state — ``turns``, ``listener``, ``held`` and
    ``handling`` belong to its mailbox thread (``actor``), which alone touches them (``vita/turns/turn_control.py``)."""

    sid: str
    voice: str | None = None
    timezone: str | None = None  # the user's IANA time zone (`client_settings`), for the time tool
    tools: tuple[str, ...] | None = None  # the tools this session allows (`client_settings`); None: all
    max_tokens: int | None = None  # a Realtime client's max_output_tokens (None: llm.max_tokens)
    silent_turns: set[int] = field(default_factory=set)  # turns started without a voice (their text goes out at once)
    instructions: str | None = None  # a Realtime client's system prompt (None: the configured persona)
    client_tools: tuple = ()  # functions a Realtime client runs itself (vita.messages.ClientTool)
    tool_outputs: tuple = ()  # its results for the calls of its turn before, taken by the next committed turn
    must_call: tuple[str, ...] = ()  # its replies must call one of these client_tools (tool_choice); (): any reply
    output_audio: bool = True  # False: a text-only Realtime client (no voice is synthesized)
    channel: Channel | None = field(default=None, repr=False)  # its door's way to its client (vita/web/doors.py);
    # None until a door attaches it
    audio_rate: int = 16000  # rate of our page's binary audio frames (set by `audio_format`)
    reply_mode: str = "stream"  # "full": VITA's whole-reply-then-speech, for comparison
    speaker_echo: bool = False  # its client does not cancel its speaker's echo: the front guards against it
    said: collections.deque = field(default_factory=lambda: collections.deque(maxlen=2), repr=False)  # its last
    # replies' words, a reply cut short too (with speaker_echo: a transcript that is one of them is the echo, not a
    # question), and its latest turns whose reply audio was handed to the client's output (a reply cut short after
    # that was heard, at least in part, and echoes)
    voiced: collections.deque = field(default_factory=lambda: collections.deque(maxlen=4), repr=False)
    # ...and its latest turns whose speech began over the reply's audible echo and did not interrupt it (not
    # understood, they are dropped), with the active one's reply text so far
    over_echo: collections.deque = field(default_factory=lambda: collections.deque(maxlen=4), repr=False)
    over_echo_reply: dict[int, str] = field(default_factory=dict, repr=False)
    replying: tuple[int, str] = (0, "")  # the reply being generated, so far: (turn, words); its echo may come back
    frames: FrameBuffer = field(default_factory=FrameBuffer, repr=False)
    actor: SessionActor | None = field(default=None, repr=False)  # its mailbox and thread
    listener: SpeechListener | None = field(default=None, repr=False)  # its ears (its VAD)
    turns: TurnTaking | None = field(default=None, repr=False)
    trace: SessionTrace | None = field(default=None, repr=False)  # its spans (its thread's, as its turns are)
    record_turns: bool = False  # its turns are recorded (recording.enabled, or its user asked: recording.per_session)
    user_key: str | None = None  # who its user is, for memory (vita/memory/user_keys.py); None: nobody known
    off_record: bool = False  # its user talks off the record: nothing of it is kept in memory
    turn_frames: int = 0  # camera frames the latest turn took
    frame_sent_at: float = -1e9  # when a camera frame last went to the vision stage (monotonic)
    held: list = field(default_factory=list, repr=False)  # outputs held back: a speculative turn's until it is
    # committed, the reply to speech over the echo until its first sentence is judged
    unheard: list[ReplyText] = field(default_factory=list, repr=False)  # the reply's text, until its audio goes out
    audio_at: float = 0.0  # when the latest microphone audio arrived (monotonic)
    # Microphone audio, whatever the transport: real time with room to spare (the VAD behind it runs in real time).
    audio_budget: RateBudget = field(default_factory=lambda: RateBudget(1.5, 3.0, time.monotonic()), repr=False)
    # Typed characters: each message starts a turn (a prompt to prefill: its cost grows with its length) and cancels
    # the one before. Its rate is the registry's, from this machine's measured prefill speed.
    text_budget: RateBudget = field(default_factory=lambda: RateBudget(MOST_TEXT_CHARS_S, TEXT_BURST_CHARS,
                                                                       time.monotonic()), repr=False)
    address: str | None = None  # its client's address, as the registry counts addresses
    # Images it sends (camera frames, a Realtime client's input_image), in megapixels: each is decoded to be checked.
    image_budget: RateBudget = field(default_factory=lambda: RateBudget(IMAGE_MP_PER_S, IMAGE_BURST_MP,
                                                                        time.monotonic()), repr=False)
    output: ReplyOutput | None = field(default=None, repr=False)  # where its reply audio goes
    handling: bool = False  # the turn machine is handling an event (re-entry would be a bug: it raises)
    timed_out: bool = False  # the turn machine closed it for being idle (its connection is being closed)
    rtc_offered_at: float = -1e9  # the session's last WebRTC offer (monotonic; they are rate-limited)
    _reported: dict[str, float] = field(default_factory=dict, repr=False)
    _events: RateBudget | None = field(default=None, repr=False)  # inbound events; made (full) on first use
    _refusals: RateBudget | None = field(default=None, repr=False)  # refused events; made (full) on first use
    flooding: bool = False  # it drew more refusals than its budget: its connection is being closed
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def door(self) -> str:
        """The door its client came in by (the Socket.IO page's until a door attaches it)."""
        return self.channel.door if self.channel is not None else "socketio"

    def should_report(self, code: str, every_s: float = 1.0) -> bool:
        """Rate-limit repeated errors: a client streaming bad audio gets one error a second, not 125."""
        now = time.monotonic()
        with self.lock:
            if now - self._reported.get(code, -every_s) < every_s:
                return False
            self._reported[code] = now
            return True

    def take_event(self, per_s: float) -> bool:
        """Token bucket over inbound events (one second of burst): False when the client sends too fast."""
        now = time.monotonic()
        with self.lock:
            if self._events is None:
                self._events = RateBudget(per_s, per_s, now)
            return self._events.take(1.0, now)

    def take_text(self, chars: float, now: float, whole: bool = False) -> bool:
        """Charge typed text (or a Realtime response's new text) before its turn: False when over the budget.
        whole: more than a burst is admitted from a full budget (RateBudget.admit)."""
        return (self.text_budget.admit if whole else self.text_budget.take)(chars, now)

    def charge_texts(self, texts: list[tuple[str, float | None]], cost: Any, now: float, whole: bool = False,
                     least: float = 0.0, extra: float = 0.0) -> bool:
        """take_text for (text, cap) pairs priced by `cost` (vita/text_cost.TextCost), refused before any is read
        when they cannot fit: while the budget cools after a refusal, or when their length alone (what they cost
        at least) is over what is left. Reading them is the cost a client flooding refused texts would otherwise
        make the front pay. `least`: what the whole costs at least; `extra`: budget characters on top, priced."""
        budget = self.text_budget
        if not budget.open(now):
            return False
        lower = max(least, extra + sum(min(len(t), cap) if cap is not None else len(t) for t, cap in texts))
        available = budget.available(now)
        if lower > available and not (whole and available >= budget.burst):
            budget.cooling = True
            return False
        if self.take_text(max(least, extra + cost.of(texts)), now, whole):
            return True
        budget.spend(lower, now)  # read and refused: its length is spent, so the same text is not read again
        budget.cooling = True
        return False

    def refused(self, burst: float) -> bool:
        """Count one refused event. True once (the first time) the client has drawn `burst` refusals beyond
        REFUSED_PER_S a second: it ignores its errors, and its connection is to be closed."""
        now = time.monotonic()
        with self.lock:
            if self.flooding:
                return False
            if self._refusals is None:
                self._refusals = RateBudget(REFUSED_PER_S, burst, now)
            self.flooding = not self._refusals.take(1.0, now)
            return self.flooding


class SeatLine(Protocol):
    """What a session's clock asks of the line for a seat (SessionRegistry)."""

    def give_seat_to_line(self, sid: str) -> bool: ...

    def keep_seat(self, sid: str) -> None: ...


class SessionRegistry:
    """The seats (--max_users) and the line for them: a client that asks to wait when they are all taken is given
    the next free seat in turn, and nobody who arrives later takes it first."""

    PLACES_PER_ADDRESS = 2  # one address cannot fill the line (a page reloaded, a second tab: two)

    def __init__(self, max_users: int | None, max_waiting: int = 0,
                 address_key: Callable[[str | None], str | None] = lambda address: address):
        """max_users None: auto, sized by `size` once the machine is measured. max_waiting: the line's length (0:
        no line, a full server refuses). address_key: what counts as one address (the front's: an IPv6 /64)."""
        self.address_key = address_key
        self.auto = max_users is None
        self.max_users = SEATS_BEFORE_MEASURED if max_users is None else max_users
        self.max_waiting = max_waiting
        self.sized_by = ""  # auto: why this many
        self.text_chars_s = MOST_TEXT_CHARS_S  # one session's typed text, a second (priced by the engine's speed)
        self.on_seat_freed: Callable[[], None] | None = None  # told (outside the lock) when the line may move
        self._sessions: dict[str, Session] = {}
        self._waiting: list[str] = []  # connections waiting for a seat, the next first
        self._addresses: dict[str, str | None] = {}  # each waiting connection's client address
        self._giving_up: set[str] = set()  # seated sessions timing out for the line, until they are closed
        self._owed: dict[str, RateBudget] = {}  # address -> the text budget its last indebted session left with
        self._lock = threading.Lock()

    def size(self, speed: MeasuredSpeed) -> str | None:
        """Auto: seats from the measured speed (sessions already seated keep their seats); why, or None when the
        operator set --max_users."""
        if not self.auto:
            return None
        seats, why = seats_for(speed)
        with self._lock:
            self.max_users, self.sized_by = seats, why
        self._line_may_move()
        return why

    def price_text(self, speed: MeasuredSpeed) -> float:
        """Typed text's rate for the sessions opened from now on, from the engine's measured prefill speed."""
        with self._lock:
            self.text_chars_s = text_chars_per_s(speed)
            return self.text_chars_s

    def open(self, sid: str, address: str | None = None) -> Session | None:
        """Register a session, or None when the server is full (or others are waiting for a seat)."""
        with self._lock:
            if len(self._sessions) >= self.max_users or self._waiting:
                return None
            return self._seat(sid, self.address_key(address))

    def _seat(self, sid: str, key: str | None) -> Session:
        """(under the lock) A client that left its text budget in debt comes back to it, whichever
        connection of its address comes first or next: a new connection is no fresh burst. (The debt a neighbour
        behind the same address inherits is at most a burst.)"""
        session = self._sessions[sid] = Session(sid)
        session.text_budget.rate = self.text_chars_s
        session.address = key
        left = self._owed.get(key) if key is not None else None
        if left is not None:
            now = time.monotonic()
            if left.available(now) >= 0:
                del self._owed[key]  # paid off meanwhile
            else:
                session.text_budget.left, session.text_budget.at = max(left.left, -left.burst), now
        return session

    def close(self, sid: str) -> Session | None:
        with self._lock:
            session = self._sessions.pop(sid, None)
            self._giving_up.discard(sid)
            if session is not None and session.address is not None:
                self._keep_owed(session)
        if session is not None:
            self._line_may_move()
        return session

    def _keep_owed(self, session: Session) -> None:
        """(under the lock) A closing session's text budget, kept for its address when in debt (a text over a burst
        taken from a full budget), unless the address already left a deeper one (two connections: the one that
        paid least does not wipe the other's debt). A budget only spent is not kept: the next session from the
        same machine, or behind the same NAT, starts afresh."""
        now, budget = time.monotonic(), session.text_budget
        if budget.available(now) >= 0:
            return
        kept = self._owed.pop(session.address, None)
        self._owed[session.address] = kept if kept is not None and kept.available(now) < budget.available(now) \
            else budget
        while len(self._owed) > OWED_KEPT:
            self._owed.pop(next(iter(self._owed)))

    # --- the line --------------------------------------------------------------------------------------------
    def wait(self, sid: str, address: str | None = None) -> int | None:
        """Join the line for a seat: the place in it (1: next), or None when the line is full (or this client's
        address holds PLACES_PER_ADDRESS places already)."""
        with self._lock:
            if sid in self._waiting:
                return self._waiting.index(sid) + 1
            key = self.address_key(address)
            held = sum(1 for other in self._waiting if self._addresses.get(other) == key)
            if len(self._waiting) >= self.max_waiting or held >= self.PLACES_PER_ADDRESS:
                return None
            self._waiting.append(sid)
            self._addresses[sid] = key
            return len(self._waiting)

    def leave_line(self, sid: str) -> bool:
        """A waiting connection went away: True if it was in the line."""
        with self._lock:
            if sid not in self._waiting:
                return False
            self._waiting.remove(sid)
            self._addresses.pop(sid, None)
        self._line_may_move()  # (those behind it move up)
        return True

    def seat_waiting(self) -> list[Session]:
        """Seat the head of the line while seats are free: the sessions seated now, in their order."""
        with self._lock:
            seated = []
            while self._waiting and len(self._sessions) < self.max_users:
                sid = self._waiting.pop(0)
                seated.append(self._seat(sid, self._addresses.pop(sid, None)))
            return seated

    def give_seat_to_line(self, sid: str) -> bool:
        """May this idle session give its seat up for someone waiting? Yes while more wait than there are seats
        free or being given up (a seat frees once its connection is closed, and the line is seated just after):
        each waiting client takes one idle session's seat, not every one whose clock passed the limit together."""
        with self._lock:
            if sid in self._giving_up:
                return True
            free = max(0, self.max_users - len(self._sessions))
            if sid not in self._sessions or len(self._waiting) <= len(self._giving_up) + free:
                return False
            self._giving_up.add(sid)
            return True

    def keep_seat(self, sid: str) -> None:
        """The session asked to give its seat up and did not (it was no longer idle): the line may take another."""
        with self._lock:
            self._giving_up.discard(sid)

    def places(self) -> list[tuple[str, int]]:
        """Each waiting connection and its place in the line (1: next)."""
        with self._lock:
            return [(sid, place) for place, sid in enumerate(self._waiting, start=1)]

    def waiting_count(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _line_may_move(self) -> None:
        """Tell the owner (outside the lock) that a seat may be free for the line: whatever it does, the seat that
        freed it stays freed."""
        if self.waiting_count() and self.on_seat_freed is not None:
            try:
                self.on_seat_freed()
            except Exception:
                log.exception("seating the line failed")

    def get(self, sid: str) -> Session | None:
        with self._lock:
            return self._sessions.get(sid)

    def all(self) -> list[Session]:
        with self._lock:
            return list(self._sessions.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
