"""What a session hears with: a listener per session (its own VAD state over the one shared Silero graph) and the
end-of-turn judge, built once per front and passed into the turn adapter (its tests bring their own)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from vita.config import Config, TurnConfig
from vita.hearing.echo_canceller import EchoCanceller
from vita.hearing.end_of_turn import EndOfTurnJudge, EndOfTurnModel
from vita.hearing.silero import SileroModel
from vita.hearing.vad import VadSegmenter
from vita.hearing.voice_gate import EchoReference
from vita.turns.listener import SpeechListener

log = logging.getLogger("vita.turns")


@dataclass(frozen=True)
class Ears:
    """What the adapter hears with, built once per front and passed in (its tests bring their own): a listener per
    session (its own VAD state over the one shared Silero graph), and the end-of-turn judge (None: silence alone
    ends a turn)."""

    listener: Callable[[], SpeechListener]
    judge: EndOfTurnJudge | None

    def session_listener(self, speaker_echo: bool, turn: TurnConfig) -> SpeechListener:
        """A new session's listener. One whose client may send the reply's echo back is also told what the client
        is played: to tell its echo from the user (the voice gate's echo reference) and, with turn.echo_cancel, to
        take it out of what its microphone hears."""
        listener = self.listener()
        if speaker_echo:
            listener.segmenter.gate.echo = EchoReference()
            if turn.echo_cancel:
                listener.canceller = echo_canceller(turn.noise_suppression)
        return listener

    @classmethod
    def load(cls, config: Config) -> Ears:
        vad_model = SileroModel(config.vad_model_path())  # shared by every session's VAD
        judge = (EndOfTurnJudge(EndOfTurnModel(config.end_of_turn_model_path()))
                 if config.turn.end_of_turn_model else None)
        return cls(lambda: SpeechListener(VadSegmenter.from_config(config.vad, vad_model, config.turn)), judge)


def echo_canceller(noise_suppression: bool) -> EchoCanceller | None:
    """A session's echo canceller, or None where WebRTC's audio processing cannot load (the voice gate's echo guard
    still stands)."""
    try:
        return EchoCanceller(noise_suppression=noise_suppression)
    except Exception:
        log.exception("no echo canceller: the session keeps only the echo guard")
        return None
