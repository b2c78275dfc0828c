"""What a session hears with: a listener per session (its own VAD state over the one shared Silero graph) and the
end-of-turn judge, built once per front and passed into the turn adapter (its tests bring their own)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vita.config import Config
from vita.hearing.end_of_turn import EndOfTurnJudge, EndOfTurnModel
from vita.hearing.vad import SileroModel, VadSegmenter
from vita.turns.listener import SpeechListener


@dataclass(frozen=True)
class Ears:
    """What the adapter hears with, built once per front and passed in (its tests bring their own): a listener per
    session (its own VAD state over the one shared Silero graph), and the end-of-turn judge (None: silence alone
    ends a turn)."""

    listener: Callable[[], SpeechListener]
    judge: EndOfTurnJudge | None

    @classmethod
    def load(cls, config: Config) -> Ears:
        vad_model = SileroModel(config.vad_model_path())  # shared by every session's VAD
        judge = (EndOfTurnJudge(EndOfTurnModel(config.end_of_turn_model_path()))
                 if config.turn.end_of_turn_model else None)
        return cls(lambda: SpeechListener(VadSegmenter.from_config(config.vad, vad_model, config.turn)), judge)
