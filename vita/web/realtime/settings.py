"""A Realtime session's settings as this server opens and shows them: the server's voice and semantic VAD to
begin with, the GA `session` object, and the one rule a call adds (no push-to-talk: its microphone is a track)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vita.web.realtime.protocol import ProtocolError, Settings, ToolChoice, TurnDetection, session_json

if TYPE_CHECKING:
    from vita.messages import ClientTool
    from vita.turns.sessions import Session
    from vita.web.front_host import SessionHost

SESSION_EXPIRES_S = 3600.0


def refuse_push_to_talk(settings: Settings) -> None:
    """A call's microphone is on the track, where the server's turn detection takes the turns: no commits."""
    if settings.turn_detection is None:
        raise ProtocolError("unsupported", "push-to-talk (turn_detection: null) is not served on a call: the "
                            "microphone is on the track (use the WebSocket to commit audio yourself)",
                            "session.audio.input.turn_detection")


def choose_tools(session: Session, choice: ToolChoice, tools: tuple[ClientTool, ...]) -> None:
    """What the session's turns may and must call under `choice` (on the session's thread): "none" takes every tool
    away, the server's own too; "required" or a named function makes each reply a call of the client's."""
    none = choice.mode == "none"
    session.client_tools = () if none else tools
    session.tools = () if none else None
    session.must_call = choice.must_call(tools)


def first_settings(front: SessionHost) -> Settings:
    """A new session's settings: the server's voice and its semantic VAD."""
    config = front.config
    return Settings(voice=config.tts.voice, turn_detection=TurnDetection(
        "semantic_vad", config.vad.start_threshold, config.vad.pre_roll_ms, config.turn.incomplete_wait_ms))


def session_summary(front: SessionHost, settings: Settings, session_id: str) -> dict[str, Any]:
    """The GA `session` object for these settings."""
    config = front.config
    return session_json(settings, session_id, front.llm_choice["model"] or "vita", config.asr.model,
                        config.llm.max_tokens, SESSION_EXPIRES_S)
