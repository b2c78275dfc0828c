"""The turn machine's rules for what is not the user's speech: the reply's progress (audio sent, the reply's end,
its playback, a turn the workers could not answer), the clock (the stall watchdog, the idle timeout), the client's
recording toggles, interruptions from outside and the session's connect/disconnect. Part of ``TurnTaking``
(``vita/turns/turn_taking.py``), whose state these methods read and change; pure like it."""

from __future__ import annotations

from vita.client_events import ErrorNotice, OutOfTime, StateChanged, StopSpeaking
from vita.turns.turn_events import (
    DISCARDED,
    ECHOED,
    STALLED,
    STALLED_MESSAGE,
    STALLED_MID_REPLY,
    Action,
    AudioSent,
    CarrySpeech,
    CloseSession,
    Connected,
    Disconnected,
    FinishAfter,
    FirstAudio,
    Interrupted,
    PlaybackDone,
    RecordingToggled,
    ReplyComplete,
    Route,
    Send,
    StopTurn,
    Tick,
    TurnDone,
    TurnUnanswered,
    WorkerProgress,
)


class ReplyProgress:
    """A part of TurnTaking: its methods run on the machine itself."""

    def idle_for(self, now: float) -> float:
        return now - self.last_activity

    def stalled(self, now: float) -> bool:
        """The committed turn has had no reply audio for stall_s, counted from its start, its latest audio or news
        from a worker, or the end of what the client is still playing: a lost end or a stuck worker, never a slow
        one that is still telling of its progress."""
        turn = self.turn
        if turn is None or turn.speculative:
            return False
        return now - max(turn.progress_at, turn.playback_ends_at) > self.stall_s

    def _on_RecordingToggled(self, e: RecordingToggled) -> list[Action]:
        self.last_activity = e.now
        self.speech = None  # the listener forgets it too (it is reset), with what it carried
        self.pending_text = ""
        if self.turn is not None:
            self.turn.ducked = False
        if self._committed():
            return self._cancel(e.reason)
        actions = self._cancel(DISCARDED) if self.turn is not None else []
        return actions + [Send(StopSpeaking())]

    def _on_Interrupted(self, e: Interrupted) -> list[Action]:
        actions = self._cancel(e.reason, forget=e.reason == ECHOED)  # (an echo is no exchange to remember)
        if self.speech is not None and self.speech.carrying is not None:  # e.g. reset: forgotten with the rest
            self.speech.carrying = None
            actions.append(CarrySpeech(None))
        return actions

    def _on_AudioSent(self, e: AudioSent) -> list[Action]:
        if self.route(e.turn_id) is not Route.DELIVER:
            return []
        turn = self.turn
        actions: list[Action] = []
        if turn.first_audio_at is None:
            turn.first_audio_at = e.now
            actions.append(Send(StateChanged("speaking", e.turn_id)))
            times = {"first_audio_s": e.now - turn.committed_at}
            if turn.speech_end_at is not None:
                times["voice_to_voice_s"] = e.now - turn.speech_end_at
            actions.append(FirstAudio(e.turn_id, times))
        turn.playback_ends_at = max(turn.playback_ends_at, e.now) + e.seconds
        turn.progress_at = e.now
        return actions

    def _on_WorkerProgress(self, e: WorkerProgress) -> list[Action]:
        if self.route(e.turn_id) is not Route.DROP:  # (a held reply's worker is at work on it too)
            self.turn.progress_at = max(self.turn.progress_at, e.now)
        return []

    def _on_ReplyComplete(self, e: ReplyComplete) -> list[Action]:
        if self.route(e.turn_id) is not Route.DELIVER:
            return []
        left = self.turn.playback_ends_at - e.now
        if left > 0:  # the turn stays interruptible until the client has played what it was sent
            return [FinishAfter(e.turn_id, left)]
        return self._finish(e.turn_id, "done", e.now)

    def _on_PlaybackDone(self, e: PlaybackDone) -> list[Action]:
        route = self.route(e.turn_id)
        if route is Route.HOLD and self._held_for_words() is not None:
            self.turn.played_out = True  # (the words of speech over it decide: it ends, or it was interrupted)
        if route is not Route.DELIVER:
            return []
        return self._finish(e.turn_id, "done", e.now)

    def _on_TurnUnanswered(self, e: TurnUnanswered) -> list[Action]:
        if e.turn_id != self.active_turn:
            return []
        if self.speculative:  # e.g. ASR heard nothing yet: the real end of speech starts afresh
            actions = self._cancel(DISCARDED)
            if self.pause is not None and self.pause.sounds_finished:
                actions += self._end_at_pause(self.pause)  # no (more) words will come: the model's word stands
            return actions
        return self._finish(e.turn_id, e.reason, e.now, reason_in_state=True)

    def _on_Tick(self, e: Tick) -> list[Action]:
        if self.stalled(e.now):  # a lost end or a stuck worker must not leave the session "thinking" forever
            message = STALLED_MID_REPLY if self.first_audio_sent else STALLED_MESSAGE
            actions: list[Action] = [Send(ErrorNotice("turn_stalled", message))]
            actions += self._cancel(STALLED)
            self.last_activity = e.now
            return actions
        if not e.workers_ready or self.turn is not None:
            self.last_activity = e.now  # waiting for the models or for an answer is not the user being idle
            return []
        limit = self.idle_timeout_s
        if e.give_seat_up and self.idle_when_waiting_s is not None:
            limit = min(limit, self.idle_when_waiting_s)
        if self.idle_for(e.now) > limit:
            return [Send(OutOfTime()), CloseSession("idle")]
        return []

    def _on_Connected(self, e: Connected) -> list[Action]:
        self.last_activity = e.now
        return []

    def _on_Disconnected(self, e: Disconnected) -> list[Action]:
        self.speech = None
        turn, self.turn = self.turn, None
        if turn is None:
            return []
        return [StopTurn(turn.turn_id, DISCARDED if turn.speculative else "disconnect", audible=False,
                         forget=turn.speculative)]

    def _finish(self, turn_id: int, reason: str, now: float, reason_in_state: bool = False) -> list[Action]:
        unduck = self._unduck()  # the reply ended under the user's unconfirmed speech: full volume for the next
        self.turn = None
        self.last_activity = now
        state = StateChanged("listening", turn_id, reason if reason_in_state else None)
        return [*unduck, TurnDone(turn_id, reason), Send(state)]
