"""The LLM worker streaming from a real vLLM API server on loopback (`--llm_url`), not an in-process engine."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.test_llm_worker import LONG_REPLY, LlmHarness, pieces
from vita.config import Config
from vita.messages import CancelTurn, ReplyText, TurnEnded, TurnRequest, TurnTimings, WorkerStatus
from workers.generation import EnginePrompt, SamplingSettings
from workers.remote_engine import RemoteEngine, RemoteEngineError, openai_messages

log = logging.getLogger("test.remote")


def remote_config(url: str) -> Config:
    config = Config()
    config.llm.url = url
    return config


@pytest.fixture(scope="module")
def remote_llm(vllm_api):
    harness = LlmHarness(remote_config(vllm_api.url))
    yield harness
    harness.close()


def test_worker_answers_a_spoken_question_through_the_remote_server(remote_llm, vllm_api):
    ready = [m for _, m in remote_llm.events if isinstance(m, WorkerStatus) and m.state == "ready"][0]
    # The server runs from a folder this machine has, so the prompt is rendered here with that model's own chat
    # template, exactly as in process (the server's transcript template is not used for it).
    assert vllm_api.url in ready.detail and "prompt style chat" in ready.detail, ready.detail
    tokens_before = vllm_api.metric("vllm:generation_tokens_total")
    transcript = remote_llm.ask_spoken("far")
    assert "capital of france" in transcript.text.lower()
    reply = "".join(m.delta for _, m in remote_llm.of("far", ReplyText))
    said = pieces(remote_llm, "far")
    assert reply.strip() and said and " ".join(p.text for _, p in said) == " ".join(reply.split())
    (_, timings), = remote_llm.of("far", TurnTimings)
    t = timings.timings
    assert t["asr_s"] > 0 and 0 < t["first_token_s"] <= t["first_piece_s"] <= t["generate_s"]
    # Token counts come from the server's usage report: the prompt rendered here, as this tokenizer counts it, and
    # what the server says it generated.
    from transformers import AutoTokenizer

    from vita.prompting import ConversationHistory

    rendered = remote_llm.worker.prompts.build(ConversationHistory(0), transcript.text)
    expected = len(AutoTokenizer.from_pretrained(str(Config().llm_model_path()))(rendered)["input_ids"])
    assert abs(t["prompt_tokens"] - expected) <= 1 and t["tokens"] >= 1, (t["prompt_tokens"], expected)
    assert vllm_api.metric("vllm:generation_tokens_total") - tokens_before == t["tokens"]
    assert [ex.user for ex in remote_llm.worker.histories["far"]] == [transcript.text]


def test_barge_in_cancels_the_turn_and_its_remote_request(remote_llm):
    remote_llm.inbox.put(TurnRequest("cut", 1, text=LONG_REPLY))
    # Cancelled once something was said: what was said stays in history, marked interrupted (a turn cancelled
    # before any piece leaves no history at all).
    assert remote_llm.wait(lambda: bool(pieces(remote_llm, "cut")), 60)
    cancelled_at = time.monotonic()
    remote_llm.inbox.put(CancelTurn("cut", 1, "barge-in"))
    ended = remote_llm.wait_ended("cut")
    assert ended.reason == "cancelled"
    assert remote_llm.of("cut", TurnEnded)[0][0] - cancelled_at < 0.2
    (exchange,) = list(remote_llm.worker.histories["cut"])
    assert exchange.interrupted and exchange.user == LONG_REPLY


def run(coroutine, timeout: float = 120):
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


def test_closing_the_stream_aborts_generation_on_the_server(vllm_api):
    """A 300-token continuation is cut after three deltas: the server must stop generating for it."""
    async def scenario() -> tuple[float, float]:
        engine = RemoteEngine(vllm_api.url, None, None, 30)
        await engine.start(lambda *_: None)
        before = vllm_api.metric("vllm:generation_tokens_total")
        deltas = 0

        async def consume() -> None:
            nonlocal deltas
            async for _ in engine.stream(EnginePrompt("Once upon a time"), SamplingSettings(300, 0.0), "cut-300"):
                deltas += 1

        task = asyncio.create_task(consume())
        while deltas < 3:
            await asyncio.sleep(0.02)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(3.0)  # ~36 more tokens at this CPU's 12 tokens/s, had it gone on
        generated = vllm_api.metric("vllm:generation_tokens_total") - before
        running = vllm_api.metric("vllm:num_requests_running")
        await engine.aclose()
        return generated, running

    generated, running = run(scenario())
    assert running == 0 and generated < 15, (generated, running)


def test_chat_endpoint_renders_on_the_server_when_no_tokenizer_is_here(vllm_api):
    """A remote chat model whose tokenizer is not on this machine: the messages go to /v1/chat/completions,
    and the server renders them with its chat template (the prompt it counted is that template's)."""
    import jinja2
    from transformers import AutoTokenizer

    messages = [{"role": "system", "content": "Vita answers in one short sentence."},
                {"role": "user", "content": "What is the capital of France?"}]

    async def scenario() -> list:
        engine = RemoteEngine(vllm_api.url, None, None, 30)
        await engine.start(lambda *_: None)
        deltas = [d async for d in engine.stream(EnginePrompt(None, messages, ("\n",)), SamplingSettings(24, 0.0),
                                                 "chat-1")]
        await engine.aclose()
        return deltas

    deltas = run(scenario())
    text = "".join(d.text for d in deltas)
    assert "capital" in text.lower(), text
    template = jinja2.Template((ROOT / "tests" / "data" / "transcript_chat.jinja").read_text())
    rendered = template.render(messages=messages)
    expected = len(AutoTokenizer.from_pretrained(str(Config().llm_model_path()))(rendered)["input_ids"])
    (prompt_tokens,) = [d.prompt_tokens for d in deltas if d.prompt_tokens is not None]
    assert abs(prompt_tokens - expected) <= 1, (prompt_tokens, expected)


def test_a_server_that_never_comes_up_is_a_clear_error():
    reports: list[str] = []

    async def scenario() -> None:
        engine = RemoteEngine("http://127.0.0.1:9/v1", None, None, 3)
        try:
            await engine.start(lambda _state, detail: reports.append(detail))
        finally:
            await engine.aclose()

    with pytest.raises(RemoteEngineError, match=r"not ready within 3 s"):
        run(scenario())
    assert reports and "waiting for the LLM server at http://127.0.0.1:9/v1" in reports[0]


def test_a_model_the_server_does_not_serve_is_named(vllm_api):
    async def scenario() -> None:
        engine = RemoteEngine(vllm_api.url, "no-such-model", None, 10)
        try:
            await engine.start(lambda *_: None)
        finally:
            await engine.aclose()

    with pytest.raises(RemoteEngineError, match="does not serve 'no-such-model'"):
        run(scenario())


def test_media_placeholders_become_openai_parts_in_order():
    audio = np.zeros(1600, dtype=np.float32)
    red = np.zeros((8, 8, 3), dtype=np.uint8)
    red[..., 0] = 255
    prompt = EnginePrompt(None, [{"role": "system", "content": "persona"},
                                 {"role": "user", "content": [{"type": "image"}, {"type": "audio"},
                                                              {"type": "text", "text": "and this?"}]}],
                          audio=((audio, 16000),), images=(red,))
    system, user = openai_messages(prompt)
    assert system == {"role": "system", "content": "persona"}
    image, sound, text = user["content"]
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert sound["type"] == "input_audio" and sound["input_audio"]["format"] == "wav"
    import base64
    wav = base64.b64decode(sound["input_audio"]["data"])
    assert wav[:4] == b"RIFF" and len(wav) == 44 + 2 * 1600
    assert text == {"type": "text", "text": "and this?"}
