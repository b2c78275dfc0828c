"""Whose voice a chunk is: the user's, or the room's.

Silero VAD hears any voice: three people talking 20 dB under the user kept it saying "speech" without a break, so
an utterance ran to its 30 s cap and the user was never answered; a reply coming back from a speakerphone was heard
as the user interrupting and then asking its own words. The user is near the microphone and loud; other people and
the assistant's own echo are far and quieter. So a chunk Silero calls speech is the user's only when its level
stands above what the room explains: above the loud end of the room's recent sound, above its floor, near the
user's own recent level, and above the echo that what was just played could make (``EchoReference``). A word's
softer syllables right after such a chunk are the user's too (the hold), but only above the room's floor.

Pure and per session: the segmenter (``vita/hearing/vad.py``) owns one and calls ``judge`` for every 32 ms chunk.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

SAMPLE_RATE = 16000
CHUNK = 512
CHUNK_S = CHUNK / SAMPLE_RATE

ABS_FLOOR_DBFS = -60.0  # never the user's under this (a quiet speaker in a quiet room is still -50 or more)
STREAM_GAP_S = 3.0  # audio arriving after this long without any starts the stream afresh: its room is unheard
# A stream that starts with a voice takes it for the user's until it is clear whose it is (``StreamStart``):
FRESH_REFERENCE_CHUNKS = 16  # the voice's level: the median of its first half second
FRESH_QUIET_UNDER_DB = 6.0  # quiet after it: chunks Silero calls silent this far under it (a babble's are not; a
# client that sends only its user's speech from a car or a fan's room has its pauses at the noise, 6-10 dB under)
FRESH_GAP_UNDER_DB = 12.0  # a near talker's gaps: chunks this far under it, voiced or not
FRESH_GAPS = 8  # ...this many chunks: 8 in 0.7-1.9 s of speech; 2-5 in 4 s of three talkers, none of a TV or babble
# over noise
FRESH_MAX_S = 4.0  # neither within this: the voice was the room's
FRESH_MAX_CHUNKS = int(FRESH_MAX_S / CHUNK_S)
FRESH_ROOM_OVER_DB = 8.0  # ...and the room is learnt from its chunks up to this far above that voice's level
ROOM_CHUNKS = 128  # the room: the last ~4 s of chunks that were not the user's
ALL_CHUNKS = 128  # ...and the last ~4 s of every chunk, for its floor while the room is still unknown
ROOM_MIN_CHUNKS = 16  # known after half a second of it
FLOOR_MIN_CHUNKS = 8  # the floor after a quarter of a second (until then nothing is the user's: the room is unknown)
ROOM_LOUD_PERCENTILE = 90  # the room's loud end: other voices' syllables
OVER_ROOM_DB = 3.0  # the user stands this far above the room's loud end...
OPEN_OVER_ROOM_DB = 6.0  # ...and starts this far above it (a babble's loudest syllables reach 3-5 dB over its 90th
# percentile, and the hold strung them into utterances nobody said)
FLOOR_PERCENTILE = 20  # ...and this far above the floor of everything heard (before the room is known, the floor
OVER_FLOOR_DB = 12.0  # is all there is: a babble's loud syllables stand 8-12 dB over its floor)
KEEP_OVER_FLOOR_DB = 6.0  # once the user is speaking, the floor's bar is this: steady noise 10 dB under the voice
# sits ~2 dB under its own loud end, and at 12 dB over it the voice's quieter words ended the question early ("How
# many days are there" heard of "...in a leap year?"); other voices are kept out by the room's loud end
STEADY_KEEP_OVER_FLOOR_DB = 0.0  # in a room without other voices, inside the user's speech Silero alone tells it,
STEADY_HOLD_S = 0.5  # within this of a chunk of theirs over the bar...
STEADY_HOLD_SAMPLES = int(STEADY_HOLD_S * SAMPLE_RATE)
STEADY_VOICED_SHARE = 0.1  # ...a room Silero calls speech no more than this share of the time (babble 20 dB under:
# more, and its syllables between the user's words, let through, held a question open to the end of the stream)
HOLD_OVER_FLOOR_DB = 6.0  # a word's softer syllables after a loud chunk are the user's if this far above the floor
HOLD_S = 0.2  # ...and within this of it
HOLD_SAMPLES = int(HOLD_S * SAMPLE_RATE)
USER_RANGE_DB = 15.0  # once the user's level is known, a chunk this far under it is not them...
OPEN_UNDER_USER_DB = 8.0  # ...and speech opens only on chunks within this of it (a far voice's loudest syllables
# come within 12 dB of a user 20 dB over it)
LEARN_OVER_FLOOR_DB = 20.0  # the user's level is learnt from chunks this far above the floor (other voices' loudest
# syllables stand 8-14 dB over it: learnt, they would pass for the user's)...
LEARN_OVER_STEADY_DB = OPEN_OVER_ROOM_DB  # ...or, in an audible room with no other voices, this far above its loud
# end: a fan 10 dB under the voice left no chunk 20 dB over its floor, the user's level was never learnt, and an
# interruption in a voice that pauses between words waited for 650 ms of voice (1.2 s instead of 0.7 s in quiet).
# Not in a quiet room (its loud end under ABS_FLOOR_DBFS): learnt from the voice's faint tails there, a robotic
# voice's "Wait, stop." went unconfirmed until its next words in 1-2 of 3 interruptions.
LEVEL_CHUNKS = 128  # the user's level is learnt from their last ~4 s of clearly voiced speech
MIN_LEVEL_CHUNKS = 16  # ...once there is half a second of it

# Echo of what the client played (a speakerphone without echo cancellation: 50-250 ms later, attenuated).
ECHO_MAX_DELAY_S = 0.4  # played audio is heard back at most this late
ECHO_MARGIN_DB = 6.0  # the user stands this far above what the echo explains
ECHO_PRIOR_DB = -10.0  # until it is learnt, the echo comes back this far under what was played (a speakerphone's,
# at a third of its level; taken as loud as played, a call that cancels its own echo could not be interrupted)
ECHO_COUPLING_PERCENTILE = 80  # how loud the echo comes back: a high percentile of mic minus played level
ECHO_LEARN_ABOVE_DBFS = -45.0  # learnt only while what was played is this loud
ECHO_OVER_FLOOR_DB = 6.0  # ...and from a chunk this near the room's floor only where it bounds the echo (learn)
ECHO_ONSET_CHUNKS = 8  # a voiced chunk is learnt as the echo only once this many later ones have come without the
# user's speech starting: the first syllables of an interruption fall under the bar before one rises over it, and
# learnt as the echo, a user as loud as the reply raised the bar over themselves and was never heard again
ECHO_HISTORY_S = FRESH_MAX_S + 2.0  # played audio kept this long after it played (a stream's start may be judged
# again that much later)


def level_db(samples: np.ndarray) -> float:
    """dBFS of float samples in [-1, 1]."""
    return 10 * float(np.log10(float(np.mean(samples * samples)) + 1e-10))


def chunk_levels(pcm: bytes) -> np.ndarray:
    """dBFS of each whole CHUNK of int16 PCM."""
    samples = np.frombuffer(pcm, dtype="<i2")
    chunks = samples[:samples.size // CHUNK * CHUNK].reshape(-1, CHUNK).astype(np.float32) / 32768.0
    return 10 * np.log10(np.mean(chunks * chunks, axis=1) + 1e-10)


def quieter_by(pcm: bytes, than: bytes) -> float:
    """How many dB the voice in `pcm` stands under the one in `than` (int16 at 16 kHz both): `pcm`'s second
    loudest chunk against `than`'s 90th percentile one. A lone loud syllable of other people's talk is not a voice
    at that level; a request's pauses, pre-roll and softer words lie under its 90th percentile. inf: no voice in
    `pcm`; -inf: none in `than` (nothing to hold it to)."""
    heard, reference = chunk_levels(pcm), chunk_levels(than)
    if reference.size == 0:
        return -np.inf
    if heard.size == 0:
        return np.inf
    second = np.sort(heard)[-2] if heard.size >= 2 else heard[0]
    return float(np.percentile(reference, 90) - second)


def _mostly_voiced(voiced: deque[bool]) -> bool:
    """Enough of the room heard (ROOM_MIN_CHUNKS), and Silero called at least half of it speech."""
    return len(voiced) >= ROOM_MIN_CHUNKS and 2 * sum(voiced) >= len(voiced)


class EchoReference:
    """What the client was played, on the server's clock, and how loud it comes back in the microphone.

    The reply pacer knows when each piece of the reply plays at the client; its echo reaches the server up to
    ECHO_MAX_DELAY_S later. The coupling (microphone level minus played level) is learnt from chunks that were not
    the user's while something played; until there is enough of it, the echo comes back 10 dB under the reply."""

    def __init__(self) -> None:
        self.played: deque[tuple[float, float]] = deque()  # (when it starts playing, dBFS) a piece, in time order
        self.coupling: deque[float] = deque(maxlen=128)
        self.unplayed: deque[float] = deque(maxlen=ALL_CHUNKS)  # dBFS of chunks heard while nothing played

    def play(self, pcm: bytes, rate: int, at: float) -> None:
        """`pcm` (int16) starts playing at the client at `at` (monotonic)."""
        while self.played and self.played[0][0] < at - ECHO_HISTORY_S:
            self.played.popleft()
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        step = max(1, int(CHUNK_S * rate))
        start = max(at, self.played[-1][0] + CHUNK_S) if self.played else at  # (played after what came before)
        for i in range(0, samples.size, step):
            self.played.append((start + i / rate, level_db(samples[i:i + step])))

    def reference(self, at: float) -> float | None:
        """The loudest played piece whose echo may be in a chunk that ended arriving at `at` (None: nothing)."""
        earliest = at - CHUNK_S - ECHO_MAX_DELAY_S - CHUNK_S
        loudest = None
        for start, level in reversed(self.played):  # (the newest first: what is queued to play comes before)
            if start < earliest:
                break
            if start <= at and (loudest is None or level > loudest):
                loudest = level
        return loudest

    def explains(self, reference: float) -> float:
        """The loudest echo `reference` may cause in the microphone (dBFS)."""
        if len(self.coupling) < ROOM_MIN_CHUNKS:
            return reference + ECHO_PRIOR_DB
        return reference + float(np.percentile(self.coupling, ECHO_COUPLING_PERCENTILE))

    def learn(self, reference: float, level: float) -> None:
        """A chunk that was not the user's, heard while `reference` played. One at the room's floor (while nothing
        played: a reply's echo raises the floor of all that is heard) with the reply too soft to bound the echo is
        not learnt: in a fan's noise with no echo, such chunks made the echo 9 dB louder than the reply, and an
        interruption was never confirmed."""
        floor = np.percentile(self.unplayed, FLOOR_PERCENTILE) if len(self.unplayed) >= FLOOR_MIN_CHUNKS else -np.inf
        if reference >= ECHO_LEARN_ABOVE_DBFS and (level >= floor + ECHO_OVER_FLOOR_DB
                                                   or level - reference <= ECHO_PRIOR_DB):
            self.coupling.append(level - reference)


class Whose(StrEnum):
    """Whose a stream's first voice was, once it is clear."""

    USERS = "users"  # quiet followed the voice: it was the user's (a client sending audio only while they speak)
    USERS_OVER_ROOM = "users_over_room"  # a near talker's deep gaps, the room heard in them: the user's
    ROOMS = "rooms"  # neither in FRESH_MAX_S: the room's (people talking from the moment a page opened its microphone)


@dataclass
class GateMemory:
    """What a gate has learnt of its room, its user and its echo: kept when a stream starts afresh, to go back to if
    its first voice turns out to be the room's."""

    levels: deque[float]
    room: deque[float]
    room_voiced: deque[bool]
    heard: deque[float]
    heard_at: int
    loud_at: int
    floor: float | None
    room_loud: float | None
    coupling: deque[float] | None

    @classmethod
    def of(cls, gate: VoiceGate) -> GateMemory:
        coupling = gate.echo.coupling if gate.echo is not None else None
        return cls(deque(gate.levels, maxlen=LEVEL_CHUNKS), deque(gate.room, maxlen=ROOM_CHUNKS),
                   deque(gate.room_voiced, maxlen=ROOM_CHUNKS), deque(gate.heard, maxlen=ALL_CHUNKS), gate.heard_at,
                   gate.loud_at, gate._floor, gate._room_loud,
                   deque(coupling, maxlen=coupling.maxlen) if coupling is not None else None)

    def restore(self, gate: VoiceGate) -> None:
        gate.levels, gate.room, gate.room_voiced, gate.heard = self.levels, self.room, self.room_voiced, self.heard
        gate.heard_at, gate.loud_at, gate._floor, gate._room_loud = self.heard_at, self.loud_at, self.floor, \
            self.room_loud
        if gate.echo is not None and self.coupling is not None:
            gate.echo.coupling = self.coupling


class StreamStart:
    """The first seconds of a stream that began with a voice, until it is clear whose voice it is.

    Taken for the room's floor, a user's first words barred the user; taken for the user's, three people talking
    from the moment a page opened its microphone held an utterance open to its 30 s cap, again and again. A near
    talker's level falls 12 dB and more between syllables and words; other people's voices, several at once and far
    away, keep a level that hardly falls. So the voice is the user's once quiet follows it or once FRESH_GAPS chunks
    have fallen that far, and the room's when neither came in FRESH_MAX_S: then the stream is judged again from its
    start, with the room learnt from its chunks up to FRESH_ROOM_OVER_DB over that voice.
    """

    def __init__(self, memory: GateMemory):
        self.memory = memory  # what the gate had learnt when the stream started
        self.levels: list[float] = []  # dBFS of every chunk since
        self.voiced: list[bool] = []  # ...and whether Silero called it speech
        self.voice: list[float] = []  # ...of the first FRESH_REFERENCE_CHUNKS voiced ones
        self.gaps: list[float] = []  # ...of the voiced ones far under those (the room between a near talker's words)
        self.quiet = 0  # chunks Silero called silent, before the voice or well under it
        self.under = 0  # chunks far under the voice, voiced or not
        self.voiced_at: int | None = None  # stream position of the latest voiced chunk

    @property
    def reference(self) -> float:
        """The first voice's level (dBFS): the median of its first half second."""
        return float(np.median(self.voice)) if self.voice else -np.inf

    def hear(self, voiced: bool, level: float, position: int) -> Whose | None:
        """One more chunk (ending at stream `position`): whose the voice is, once that is clear."""
        self.levels.append(level)
        self.voiced.append(voiced)
        if voiced:
            self.voiced_at = position
            if len(self.voice) < FRESH_REFERENCE_CHUNKS:
                self.voice.append(level)
        reference = self.reference if self.voice else None
        if not voiced and (reference is None or level <= reference - FRESH_QUIET_UNDER_DB):
            self.quiet += 1
        gap = reference is not None and level <= reference - FRESH_GAP_UNDER_DB
        self.under += gap
        if self.quiet >= FLOOR_MIN_CHUNKS:
            return Whose.USERS
        if self.under >= FRESH_GAPS:
            return Whose.USERS_OVER_ROOM
        if voiced and gap:  # (the deciding chunk is judged as any other, once it is clear)
            self.gaps.append(level)
        return Whose.ROOMS if len(self.levels) >= FRESH_MAX_CHUNKS else None


class VoiceGate:
    """One session's judge of whose voice each chunk is (see the module's doc). `guarded` is set by the owner
    while the assistant's reply plays; `echo` (an EchoReference) is given for clients that do not cancel their
    own echo."""

    def __init__(self, echo_guard_db: float = 0.0, echo: EchoReference | None = None, voice_db: float = 10.0):
        self.echo_guard_db = echo_guard_db
        self.voice_db = voice_db  # while guarded, only a chunk this close to the user's level renews the hold
        self.echo = echo
        self.guarded = False
        self.levels: deque[float] = deque(maxlen=LEVEL_CHUNKS)  # dBFS of the user's clearly voiced chunks
        self.room: deque[float] = deque(maxlen=ROOM_CHUNKS)  # dBFS of chunks that were not the user's
        self.room_voiced: deque[bool] = deque(maxlen=ROOM_CHUNKS)  # ...and whether Silero called each one speech
        self.unplayed_voiced: deque[bool] = deque(maxlen=ROOM_CHUNKS)  # ...of those heard while nothing played
        self._playing = False  # the chunk being judged was heard while the reply played (or its echo may be in it)
        self.heard: deque[float] = deque(maxlen=ALL_CHUNKS)  # dBFS of every chunk
        self.heard_at = -HOLD_SAMPLES * 10  # stream position of the latest chunk at the user's level
        self.loud_at = -HOLD_SAMPLES * 10  # ...of the latest one while guarded within voice_db of it
        self._over_at = -CHUNK  # ...of the latest one over the bar (not the steady room's softer one)
        self._floor: float | None = None
        self._room_loud: float | None = None
        self._stale = 0  # chunks since the room's statistics were computed
        self._echo_onset: deque[tuple[float, float]] = deque()  # (played, heard) dBFS of the latest voiced chunks
        # under the bar while something played: the echo's, unless the user's speech starts right after them
        self.last_at: float | None = None  # when the latest chunk arrived (monotonic)
        self.start: StreamStart | None = None  # the stream began with a voice and it is not yet clear whose
        self.fresh_started = False  # this chunk began it (the owner keeps what follows, in case it is judged again)
        self.expired = False  # the voice was the room's: the owner judges the stream again (``judge_again``)

    @property
    def level_db(self) -> float | None:
        """The user's speech level: the 75th percentile of their recent clearly voiced chunks (dBFS)."""
        return float(np.percentile(self.levels, 75)) if len(self.levels) >= MIN_LEVEL_CHUNKS else None

    @property
    def voices(self) -> bool:
        """Other people talk in the room: Silero called most of its recent chunks speech (steady noise: none)."""
        return _mostly_voiced(self.room_voiced)

    @property
    def others_talk(self) -> bool:
        """Other people talk in the room, as heard while nothing played: what a client's own echo canceller leaves
        of the reply is voiced too, and would pass for them in a quiet room."""
        return _mostly_voiced(self.unplayed_voiced)

    @property
    def steady(self) -> bool:
        """The room is known, and no other voices are in it (steady noise, or quiet): Silero tells speech from it."""
        return (len(self.room_voiced) >= ROOM_MIN_CHUNKS
                and sum(self.room_voiced) <= STEADY_VOICED_SHARE * len(self.room_voiced))

    @property
    def room_loud_db(self) -> float | None:
        """The loud end of the room's recent sound that was not the user's (dBFS): other voices' syllables."""
        return self._room_loud

    @property
    def floor_db(self) -> float | None:
        """The floor of everything heard lately (dBFS): the room's steady sound, or its quieter moments."""
        return self._floor

    def needed(self, user: float | None, speaking: bool = False) -> float:
        """The level a voiced chunk needs to be the user's, as the room stands (`speaking`: to keep the user's
        speech going, rather than to start it)."""
        bar = self.room_bar(speaking)
        room = ABS_FLOOR_DBFS if bar is None else max(ABS_FLOOR_DBFS, bar)
        return room if user is None else max(room, user - USER_RANGE_DB)

    def room_bar(self, speaking: bool) -> float | None:
        """What the room's own sound asks of a chunk to be the user's (dBFS; None: the room is unknown): the bars over
        its floor and its loud end, not the absolute floor (`speaking`: to go on with their speech)."""
        bars = []
        if self._floor is not None:
            bars.append(self._floor + (KEEP_OVER_FLOOR_DB if speaking else OVER_FLOOR_DB))
        if self._room_loud is not None:
            bars.append(self._room_loud + (OVER_ROOM_DB if speaking else OPEN_OVER_ROOM_DB))
        return max(bars) if bars else None

    def opens(self, user: float | None) -> float:
        """The level a voiced chunk needs to start the user's speech."""
        need = self.needed(user)
        return need if user is None else max(need, user - OPEN_UNDER_USER_DB)

    def judge(self, p: float, level: float, position: int, within: bool, threshold: float,
              at: float | None = None, paused: bool = False, going_on: bool = False) -> float:
        """Silero's probability `p` for the chunk ending at stream `position`, at `level` dBFS (arrived at `at`,
        monotonic), or 0 when it is not the user's. `within`: an utterance of theirs is open (its softer syllables
        may be held); `paused`: ...but the user has paused in it (their voice comes back over the bar, not at the
        steady room's level); `going_on`: ...or it was ended at a pause and speech now would go on with it;
        `threshold`: the probability under which a chunk is silence anyway."""
        self.fresh_started = False
        if at is not None:
            self._arrive(at)
        reference = self.echo.reference(at) if self.echo is not None and at is not None else None
        self._playing = self.guarded or reference is not None
        if reference is None and self.echo is not None:
            self.echo.unplayed.append(level)
        if self.start is not None:
            whose = self.start.hear(p >= threshold, level, position)
            if whose is Whose.USERS_OVER_ROOM:
                for gap in self.start.gaps:  # (the room, heard between the user's syllables)
                    self._observe(gap)
                    self._not_users(gap, None, voiced=True)
            if whose in (Whose.USERS, Whose.USERS_OVER_ROOM):
                if self.start.voiced_at is not None:  # (their last word's softer syllables go on with it)
                    self.heard_at = max(self.heard_at, self.start.voiced_at)
                self.start = None
            elif whose is Whose.ROOMS:
                self.expired = True
        near = position - self.heard_at <= HOLD_SAMPLES  # (right after the user's voice: the tail of their word)
        if p < threshold:
            self._observe(level)
            self._not_users(level, None if near else reference, voiced=False)  # (no measure of the echo)
            return p
        if self.start is not None or self.expired:
            return p  # not yet clear whose the stream's first voice is: the user's, as a VAD alone has it
        self._observe(level)
        if self._floor is None and not within:  # the room is still unknown: nothing starts yet
            self._not_users(level, reference, voiced=True)
            return 0.0
        user = self.level_db
        # Inside the user's speech, a chunk over the room's lower bar is theirs while a word of theirs was heard within
        # the hold; after a longer gap, in a room of voices, only with the chunk after it (a babble's loudest
        # syllables, a chunk each, kept a question open long after it; held to the bar for starting instead, a
        # softer last word, "...of Japan?", was lost). Not over the reply: the echo guard's bar holds there anyway,
        # and an interruption must not wait.
        going = self.guarded or not self.voices or position - self.heard_at <= HOLD_SAMPLES
        # Speech going on with an utterance ended at a pause opens among other voices over the bar for starting (and,
        # as after any gap there, with the chunk after it): over the bar for going on, their syllables did so 0.3-1.9 s
        # after a question's end, in 16 of 72 with people 10 dB under the voice (each a turn withdrawn and answered
        # seconds later, their words in it).
        reopens = going_on and not going
        need = self.needed(user, speaking=True) if within and not reopens else self.opens(user)
        must = -np.inf  # (over the reply's echo, and the echo guard's bar: whatever else a chunk passes)
        echo = self.echo.explains(reference) if reference is not None else None
        if echo is not None:
            must = max(must, echo + ECHO_MARGIN_DB)
        if self.guarded and self.echo_guard_db and user is not None:
            must = max(must, user - self.echo_guard_db)
        need = max(need, must)
        softer = self._steady_bar(user, position) if within and not paused else None
        # Not learnt while something plays (its echo would be learnt).
        learn = level >= self._learn_bar() and not self.guarded and reference is None
        if level >= need:
            self._echo_onset.clear()  # (what fell under the bar just before was the onset of this voice)
            over, self._over_at = self._over_at, position
            if within and not going and over != position - CHUNK:
                return 0.0
            if self.guarded and self.echo_guard_db and user is not None:
                if level >= user - self.voice_db:  # the user's voice itself: their softer syllables may follow
                    self.heard_at = self.loud_at = position
            else:
                self.heard_at = position
            if learn:
                self.levels.append(level)
            return p
        if softer is not None and level >= max(softer, must):
            return p  # a softer syllable of the user's, in steady noise
        if learn and user is not None and level >= self.needed(None):
            # Above the room but far under the user's level: the user moved away from the microphone, or is
            # someone else near it; learnt, so that a user who now speaks softer is heard again after ~3 s of it.
            self.levels.append(level)
        hold_need = max(self._floor + HOLD_OVER_FLOOR_DB if self._floor is not None else ABS_FLOOR_DBFS,
                        echo if echo is not None else -np.inf)
        if within and near and level >= hold_need:
            return p  # a softer syllable of the word the user is saying
        if not near:  # (right after the user's voice, what falls under the bar is theirs: no measure of the room)
            self._not_users(level, reference, voiced=True)
        return 0.0

    def _learn_bar(self) -> float:
        """The level a chunk of the user's needs for their level to be learnt from it (inf: none yet, the room's
        floor is unknown and its voices would pass for the user's)."""
        if self._floor is None:
            return np.inf
        bar = self._floor + LEARN_OVER_FLOOR_DB
        if self.steady and self._room_loud is not None and self._room_loud >= ABS_FLOOR_DBFS:
            bar = min(bar, self._room_loud + LEARN_OVER_STEADY_DB)  # (an audible noise: not a quiet room's)
        return bar

    def _steady_bar(self, user: float | None, position: int) -> float | None:
        """In a room with no other voices, Silero is taken at its word for what follows the user's voice within
        STEADY_HOLD_S: theirs down to the floor (steady noise 10 dB under the voice sits at their softer syllables:
        the softer half of "Wait, stop." refused, the interruption waited for its next words to be confirmed, 1.0-1.2
        s instead of 0.7 s). Not a lone chunk long after their voice (Silero's odd call on the noise kept an
        utterance open), nor far under the user once their level is known. None: no such bar here. (Nor is it asked
        after a pause, `judge`'s `paused`: Silero's call on the room's sound as a voice fades resumed the pause at
        the end of 10 of 16 questions over a fan, each resume withdrawing the turn begun there.)"""
        if self._floor is None or not self.steady or position - self._over_at > STEADY_HOLD_SAMPLES:
            return None
        bar = max(self._floor + STEADY_KEEP_OVER_FLOOR_DB, ABS_FLOOR_DBFS)
        return bar if user is None else max(bar, user - USER_RANGE_DB)

    def judge_again(self) -> None:
        """The stream's first voice was the room's (``expired``): what was learnt since it started is forgotten, the
        room is learnt from its chunks up to FRESH_ROOM_OVER_DB over that voice, and the owner judges them again."""
        start, self.start, self.expired = self.start, None, False
        if start is None:
            return
        start.memory.restore(self)
        self._echo_onset.clear()
        # (what rose far above the first voice since was someone nearer: the user, perhaps)
        room = [(level, voiced) for level, voiced in zip(start.levels, start.voiced, strict=True)
                if level <= start.reference + FRESH_ROOM_OVER_DB]
        for level, _ in room:
            self.heard.append(level)
        if self.heard:
            self._floor = float(np.percentile(self.heard, FLOOR_PERCENTILE))
        for level, voiced in room:
            self._not_users(level, None, voiced)
        if len(self.room) >= ROOM_MIN_CHUNKS:
            self._room_loud = float(np.percentile(self.room, ROOM_LOUD_PERCENTILE))

    def _arrive(self, at: float) -> None:
        first = self.last_at is None and not self.heard
        if first or (self.last_at is not None and at - self.last_at > STREAM_GAP_S):
            # The stream starts (again) with this chunk: a client that sends nothing until its user speaks
            # (push-to-talk, a client's own VAD, a typed question then speech over the reply) begins with the
            # user's own voice, which would otherwise be taken for the room's floor and bar the user.
            self.fresh_started, self.expired = True, False
            self.start = StreamStart(GateMemory.of(self))
        self.last_at = at

    def echo_removed(self) -> None:
        """The echo is taken out of the audio from now on (the server's canceller found it): what was learnt from the
        uncancelled echo, the room's loud end and how loud the echo comes back, is learnt again."""
        self._echo_onset.clear()
        memories = [self] if self.start is None else [self, self.start.memory]
        for memory in memories:
            memory.room.clear()
            memory.room_voiced.clear()
        self._room_loud = None
        if self.start is not None:
            self.start.memory.room_loud = None
            if self.start.memory.coupling is not None:
                self.start.memory.coupling.clear()
        if self.echo is not None:
            self.echo.coupling.clear()

    def _observe(self, level: float) -> None:
        self.heard.append(level)
        self._stale += 1
        if self._stale >= 4 or self._floor is None:  # every ~0.13 s: the room changes slowly
            self._stale = 0
            if len(self.heard) >= FLOOR_MIN_CHUNKS:
                self._floor = float(np.percentile(self.heard, FLOOR_PERCENTILE))
            if len(self.room) >= ROOM_MIN_CHUNKS:
                self._room_loud = float(np.percentile(self.room, ROOM_LOUD_PERCENTILE))

    def _not_users(self, level: float, reference: float | None, voiced: bool) -> None:
        if self._floor is None or level < self._floor + LEARN_OVER_FLOOR_DB:  # (a near voice is no room's)
            self.room.append(level)
            self.room_voiced.append(voiced)
            if not self._playing:
                self.unplayed_voiced.append(voiced)
        if reference is None:
            return
        if not voiced or level - reference < ECHO_PRIOR_DB - ECHO_MARGIN_DB:
            self.echo.learn(reference, level)  # (so far under the reply: no onset that could raise the bar)
            return
        self._echo_onset.append((reference, level))
        if len(self._echo_onset) > ECHO_ONSET_CHUNKS:
            self.echo.learn(*self._echo_onset.popleft())
