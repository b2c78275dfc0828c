"""The benchmark's clients: VITA's page, a Realtime client and a phone call, each telling what it was told as one
list of turns."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scripts.bench.rooms.sounds import RATE, REPLY_RATE, Speaker


# --- the doors: a client, and what it was told as one list of turns ------------------------------------------
@dataclass
class Turn:
    key: str
    at: float  # committed (Socket.IO `turn`, Realtime `response.created`)
    heard: str = ""
    reply: str = ""
    first_audio: float | None = None
    end: float | None = None
    reason: str | None = None  # why it ended without its whole reply (None: it did not)
    stages: dict = field(default_factory=dict)  # the server's own timings of it (Socket.IO `timings`), by stage


class Door:
    """One session through one door: `connect`, a `send` for the microphone, `turns()` and `stops()` so far."""

    chunk_ms = 8

    def __init__(self, url: str, speaker: Speaker | None):
        self.url, self.speaker = url, speaker


class VitaDoor(Door):
    """VITA's page: JSON audio every 8 ms; the reply's `audio` played as it comes, dropped at `stop_tts`."""

    chunk_ms = 8

    def connect(self) -> VitaDoor:
        from tests.harness.client import RecordingClient

        speaker = self.speaker

        class Client(RecordingClient):
            async def _record(self, event: str, data: object = None) -> None:
                await super()._record(event, data)
                if speaker is not None and event == "audio" and isinstance(data, bytes | bytearray):
                    speaker.play(bytes(data), self.events[-1][0])
                elif speaker is not None and event == "stop_tts":
                    speaker.stop(self.events[-1][0])

        self.client = Client(self.url).connect()
        return self

    def send(self, pcm: np.ndarray) -> None:
        from tests.harness.speech import vita_message

        self.client.sio.emit("audio", vita_message(pcm))

    def events(self) -> list:
        with self.client.changed:
            return list(self.client.events)

    def turns(self) -> list[Turn]:
        turns: dict[int, Turn] = {}
        speaking = None
        for t, name, d in self.events():
            if name == "turn":
                turns[d["turn_id"]] = Turn(str(d["turn_id"]), t)
            elif not isinstance(d, dict) and name != "audio":
                continue
            elif name == "transcript" and d["turn_id"] in turns:
                turns[d["turn_id"]].heard = d["text"]
            elif name == "response_text" and d["turn_id"] in turns:
                turns[d["turn_id"]].reply = d["text"]
            elif name == "state" and d.get("turn_id") in turns:
                if d["state"] == "speaking":
                    speaking = d["turn_id"]
                elif d["state"] == "listening":
                    turn = turns[d["turn_id"]]
                    turn.end, turn.reason = t, d.get("reason")
            elif name == "timings" and d.get("turn_id") in turns:
                turns[d["turn_id"]].stages[d.get("stage")] = {k: v for k, v in d.items() if isinstance(v, float)}
            elif name == "turn_cancelled" and d.get("turn_id") in turns:
                turns[d["turn_id"]].reason = d.get("reason")
            elif name == "audio" and speaking in turns and turns[speaking].first_audio is None:
                turns[speaking].first_audio = t
        return list(turns.values())

    def stops(self) -> list[float]:
        return [t for t, name, _ in self.events() if name == "stop_tts"]

    def close(self) -> None:
        self.client.close()


class RealtimeDoor(Door):
    """A Realtime client: 24 kHz PCM appended every 40 ms, the server's VAD; the reply's deltas played as they
    come, dropped when its response is cancelled."""

    chunk_ms = 40

    def connect(self) -> RealtimeDoor:
        import soxr

        from tests.harness.realtime_client import RealtimeClient

        speaker = self.speaker
        voiced: set[str] = set()  # the responses whose audio it was given (a client drops only those when cancelled)

        class Client(RealtimeClient):
            def _heard(self, at: float, record: dict) -> None:
                kind = record.get("type")
                if speaker is not None and kind == "response.output_audio.delta":
                    voiced.add(record.get("response_id"))
                    speaker.play(base64.b64decode(record["delta"]), at)
                elif (speaker is not None and kind == "response.done" and record["response"]["status"] == "cancelled"
                      and record["response"].get("id") in voiced):
                    speaker.stop(at)

        self.client = Client(self.url)
        self.client.wait_type("session.created")
        self.resampler = soxr.ResampleStream(RATE, REPLY_RATE, 1, dtype="int16")
        return self

    def send(self, pcm: np.ndarray) -> None:
        self.client.append(self.resampler.resample_chunk(pcm))

    def events(self) -> list:
        with self.client.changed:
            return list(self.client.events)

    def turns(self) -> list[Turn]:
        turns: dict[str, Turn] = {}
        heard: dict[str, str] = {}
        item_of: dict[str, str] = {}
        last_item = None
        for t, e in self.events():
            kind = e.get("type")
            if kind == "input_audio_buffer.committed":
                last_item = e["item_id"]
            elif kind == "conversation.item.input_audio_transcription.completed":
                heard[e["item_id"]] = e["transcript"]
            elif kind == "response.created":
                rid = e["response"]["id"]
                turns[rid], item_of[rid] = Turn(rid, t), last_item
            elif kind == "response.output_audio.delta" and e["response_id"] in turns:
                turn = turns[e["response_id"]]
                turn.first_audio = turn.first_audio or t
            elif kind == "response.output_audio_transcript.done" and e["response_id"] in turns:
                turns[e["response_id"]].reply = e["transcript"]
            elif kind == "response.done" and e["response"]["id"] in turns:
                turn, details = turns[e["response"]["id"]], e["response"].get("status_details") or {}
                turn.end = t
                status = e["response"]["status"]
                turn.reason = None if status == "completed" else (
                    details.get("reason") or (details.get("error") or {}).get("code") or status)
        for rid, turn in turns.items():
            turn.heard = heard.get(item_of[rid] or "", "")
        return list(turns.values())

    def stops(self) -> list[float]:
        return [t for t, e in self.events() if e.get("type") == "response.done"
                and e["response"]["status"] == "cancelled"]

    def close(self) -> None:
        self.client.close()


class PhoneDoor(Door):
    """A phone call through the phone door (Twilio's dialect, tests/harness/phone_client.py): the room's microphone
    as 8 kHz μ-law in 20 ms media messages, the reply's media played as it comes, dropped at `clear`. A phone
    hears no text: what each turn heard and said is read from the server's turn log (`files`: its state folder
    and log), its first audio from the media the phone was sent."""

    chunk_ms = 20

    def __init__(self, url: str, speaker: Speaker | None, files: tuple[Path, Path] | None = None):
        super().__init__(url, speaker)
        if files is None:
            raise SystemExit("--door phone reads the server's turn log: let the benchmark start the server")
        self.state_dir, self.log_path = files

    def connect(self) -> PhoneDoor:
        import soxr

        from tests.harness.phone_client import PhoneCall

        speaker, up = self.speaker, soxr.ResampleStream(8000, REPLY_RATE, 1, dtype="int16")

        class Call(PhoneCall):
            def _play(self, message: dict, now: float) -> None:
                super()._play(message, now)
                if speaker is not None and message.get("event") == "media":
                    speaker.play(up.resample_chunk(self.played[-1]).tobytes(), now)
                elif speaker is not None and message.get("event") == "clear":
                    speaker.stop(now)

        self.call = Call(self.url, "twilio")
        self.call.start()
        self.clock = time.time() - time.monotonic()  # the turn log's wall clock, on ours
        self.down = soxr.ResampleStream(RATE, 8000, 1, dtype="int16")
        self.pending = np.zeros(0, np.int16)
        self.chunk = 0
        return self

    def send(self, pcm: np.ndarray) -> None:
        from vita.web.codecs import g711_encode

        self.pending = np.concatenate([self.pending, self.down.resample_chunk(pcm)])
        while self.pending.size >= 160:
            frame, self.pending = self.pending[:160], self.pending[160:]
            self.call.send(self.call.media(g711_encode(frame, "ulaw"), self.chunk))
            self.chunk += 1

    def turns(self) -> list[Turn]:
        media = [at for at, _ in self.call.of("media")]
        turns = []
        for row in self.call.logged_turns(self.log_path.read_text(errors="replace"), self.state_dir):
            if row["end_reason"] == "stop command":  # ("Wait, stop." alone: it stopped the reply, it asked nothing)
                continue
            at, end = row["started_at"] - self.clock, row["ended_at"] - self.clock
            reason = None if row["end_reason"] in ("done", "") and not row["interrupted"] else row["end_reason"]
            first = next((t for t in media if at <= t <= end), None)
            turns.append(Turn(str(row["turn_id"]), at, row["transcript"], row["reply"], first, end, reason))
        # A turn is logged once it is over: a reply playing now is one whose audio came after the last logged turn
        # and still comes (the last of a logged reply's audio may follow its end by a moment)
        playing = [t for t in media if not turns or t > turns[-1].end + 0.5]
        if playing and time.monotonic() - media[-1] < 1.0:
            turns.append(Turn("playing", playing[0], first_audio=playing[0]))
        return turns

    def stops(self) -> list[float]:
        return [at for at, _ in self.call.of("clear")]

    def close(self) -> None:
        self.call.hang_up()


DOORS = {"vita": VitaDoor, "realtime": RealtimeDoor, "phone": PhoneDoor}
