"""The LLM worker's ears: Whisper on a turn's audio (a second model's opinion when it is unsure, and whether what it
heard may not be what was said), and short speech over a reply heard for a stop command."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vita.messages import (
    InterjectionCheck,
    InterjectionText,
    Transcript,
    TurnRequest,
)
from vita.words import after_stop_command, said_words
from workers.llm.engines.asr import Transcription
from workers.llm.kit import LlmKit
from workers.llm.turn_output import TurnOutput
from workers.llm.turn_run import TurnRun

if TYPE_CHECKING:
    from vita.config import Config


def second_opinion(config: Config, threads: int) -> Any:
    """A second Whisper for the utterances the first is unsure of (two models that disagree misheard, where one
    model's confidence alone cannot see fluent nonsense), on the first's threads; English-only models only serve
    English. None: none."""
    cfg = config.asr
    if not cfg.second_opinion or cfg.second_opinion == cfg.model or (
            cfg.second_opinion.endswith(".en") and cfg.language not in ("en", None)):
        return None
    from workers.llm.engines.asr import WhisperTranscriber

    second = WhisperTranscriber(config.models_path() / cfg.second_opinion, cfg.compute_type,
                                threads, "en", cfg.beam_size, short_window=cfg.short_window,
                                workers=cfg.workers)
    second.warm_up()  # off the first turn too
    return second


class Hearing:
    """latest_check(session): (turn, pause) of its newest interjection check (the worker's, kept as it reads its
    inbox)."""

    def __init__(self, kit: LlmKit, out: TurnOutput, log: logging.Logger,
                 latest_check: Callable[[str], tuple[int, int] | None]):
        self.kit, self.out, self.log, self.latest_check = kit, out, log, latest_check

    async def hear_interjection(self, check: InterjectionCheck) -> None:
        """ASR alone on short speech over a reply (the front decides whether it was "Stop."); no turn, no history.
        It shares the ASR threads with the turns' transcripts, first come, first served."""
        def transcribe_if_newest() -> str | None:  # a later pause's check supersedes it: skip the Whisper run
            if self.latest_check(check.session_id) != (check.turn_id, check.pause):
                return None
            return self.kit.asr.transcribe(check.audio, check.sample_rate, redecode=False)  # a stop must not wait

        try:
            text = await self.kit.in_thread(transcribe_if_newest)
        except Exception:  # the front then leaves the reply playing: short speech over it is not a turn
            self.log.exception("interjection ASR failed")
            text = ""
        if text is not None:
            self.out.publish(InterjectionText(check.session_id, check.turn_id, check.pause, text))

    async def cascade_text(self, req: TurnRequest, run: TurnRun) -> str:
        """Cascade: the utterance through ASR, joined with any typed text."""
        transcript = ""
        if req.audio:
            heard = await self.kit.in_thread(self.kit.asr.hear, req.audio, req.sample_rate, True,
                                             bool(req.unless_command))
            transcript = heard.text
            run.timings["asr_s"] = time.monotonic() - run.started
            if transcript:
                run.timings["asr_logprob"] = heard.avg_logprob
                if heard.beam:
                    run.timings["asr_beam"] = 1.0
                if heard.looped:  # (asked again, where the config asks again, with a high asr_logprob: this says why)
                    run.timings["asr_looped"] = 1.0
                rule = self.kit.misheard_rule
                if not req.text.strip():  # typed words say what was meant
                    heard = self.request_heard(req, run, heard)
                    run.misheard = rule.unsure(heard) or (rule.worth_a_second_opinion(heard)
                                                          and await self.disagree(req, run, heard))
                    reads = self.kit.engine.reads_words and rule.reads
                    if not run.misheard and reads and rule.worth_a_reading(heard):
                        run.reading = heard  # read as the reply's prompt is prefilled (workers/llm/reply_generation.py)
                    run.sense_check = not run.misheard and not reads and rule.worth_a_sense_check(heard)
            self.out.publish(Transcript(req.session_id, req.turn_id, transcript))
        return " ".join(t for t in (transcript, req.text.strip()) if t)

    @staticmethod
    def request_heard(req: TurnRequest, run: TurnRun, heard: Transcription) -> Transcription:
        """Speech that stopped a reply, opening with the command: what is judged is Whisper's confidence in the request
        after it, the one thing answered (over the echo the command is often its least sure words)."""
        request = after_stop_command(heard.text, req.unless_command)  # (the text as it is with no command to stop)
        if request == heard.text.strip() or not heard.tokens:
            return heard
        run.timings["asr_request_logprob"] = round(heard.confidence_of(request), 3)
        return dataclasses.replace(heard, avg_logprob=run.timings["asr_request_logprob"])

    async def disagree(self, req: TurnRequest, run: TurnRun, heard: Transcription) -> bool:
        """Whisper was unsure: does a second model hear the same words? (scripts/bench/stages/asr.py accuracy: with it,
        "say it again" catches 7 of 9 garbled robotic questions instead of 5, 34 of 46 noisy ones instead of 28.)"""
        if self.kit.second_asr is None:
            return False
        started = time.monotonic()
        other = await self.kit.in_thread(self.kit.second_asr.hear, req.audio, req.sample_rate)
        rule = self.kit.misheard_rule
        run.timings["second_asr_s"] = time.monotonic() - started
        request = after_stop_command(heard.text, req.unless_command) if req.unless_command else heard.text
        if request != heard.text.strip():  # speech that stopped a reply, opening with the command: over the echo each
            # model mishears that its own way ("Weighed up, can penguins fly?"); the request decides, against as many
            # of the other's last words
            heard = dataclasses.replace(heard, text=request)  # (counted as compared: numbers as digits)
            other = dataclasses.replace(other, text=" ".join(said_words(other.text)[-len(said_words(request)):]))
        run.timings["asr_disagreement"] = round(rule.disagreement(heard, other), 3)
        return rule.disagree(heard, other)

    async def omni_transcript(self, req: TurnRequest) -> str:
        transcript = await self.kit.in_thread(self.kit.asr.transcribe, req.audio, req.sample_rate)
        self.out.publish(Transcript(req.session_id, req.turn_id, transcript))
        return " ".join(t for t in (transcript, req.text.strip()) if t)
