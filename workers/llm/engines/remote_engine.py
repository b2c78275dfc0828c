"""An OpenAI-compatible server as the engine (`--llm_url`): vLLM's API server, scaled by its operators.

A prompt this worker rendered itself (it has the model's tokenizer) goes to ``/v1/completions``, so the
remote model sees exactly what the in-process engine would. Otherwise ``/v1/chat/completions`` gets the
messages, with utterance audio and camera frames as ``input_audio`` / ``image_url`` parts for omni models.
Closing the response stream is the cancellation: vLLM aborts a request whose client went away.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import time
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from vita.messages import WorkerState
from workers.llm.engines.generation import Delta, EnginePrompt, SamplingSettings

RETRY_EVERY_S = 2.0
KEEPALIVE_S = 4.0


class RemoteEngineError(RuntimeError):
    """The LLM server refused or broke a request; the message is meant for the user's error line."""


def wav_base64(audio: np.ndarray, rate: int) -> str:
    pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def jpeg_data_url(image: np.ndarray) -> str:
    import cv2

    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 85])
    if not ok:
        raise RemoteEngineError("could not encode a camera frame")
    return "data:image/jpeg;base64," + base64.b64encode(jpeg.tobytes()).decode("ascii")


def openai_messages(prompt: EnginePrompt) -> list[dict[str, Any]]:
    """Fill the messages' {"type": "audio"} / {"type": "image"} placeholders with the prompt's media, in order."""
    audio, images = iter(prompt.audio), iter(prompt.images)
    out = []
    for message in prompt.messages:
        content = message["content"]
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "audio":
                    samples, rate = next(audio)
                    parts.append({"type": "input_audio",
                                  "input_audio": {"data": wav_base64(samples, rate), "format": "wav"}})
                elif part.get("type") == "image":
                    parts.append({"type": "image_url", "image_url": {"url": jpeg_data_url(next(images))}})
                else:
                    parts.append({"type": "text", "text": part.get("text", "")})
            content = parts
        out.append({"role": message["role"], "content": content})
    return out


class RemoteEngine:
    reads_words = False  # the model is told the words may be misheard instead (asr.sense_check_below)

    def __init__(self, url: str, model: str | None, api_key: str | None, ready_timeout_s: float):
        self.url = url.rstrip("/")
        self.model = model
        self.api_key = api_key or os.environ.get("VITA_LLM_API_KEY") or None
        self.ready_timeout_s = ready_timeout_s
        self.model_root: Path | None = None
        self.http = None
        self.description = f"remote engine at {self.url}"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    async def start(self, report: Any) -> None:
        """Wait for the server (it may still be loading) and pick the model it serves."""
        import aiohttp

        # uvicorn (vLLM's API server) drops idle connections after 5 s: never reuse one older than that.
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=120),
                                          headers=self._headers(),
                                          connector=aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE_S))
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            try:
                async with self.http.get(f"{self.url}/models") as response:
                    if response.status in (401, 403):
                        raise RemoteEngineError(f"the LLM server at {self.url} refused the API key "
                                                f"(HTTP {response.status}); set VITA_LLM_API_KEY")
                    if response.status == 200:
                        models = (await response.json()).get("data") or []
                        break
                    problem = f"HTTP {response.status}"
            except (TimeoutError, aiohttp.ClientError, json.JSONDecodeError) as exc:
                problem = f"{exc.__class__.__name__}: {exc}"
            if time.monotonic() > deadline:
                raise RemoteEngineError(f"the LLM server at {self.url} was not ready within "
                                        f"{self.ready_timeout_s:g} s ({problem})")
            report(WorkerState.LOADING, f"waiting for the LLM server at {self.url} ({problem})")
            await asyncio.sleep(RETRY_EVERY_S)
        served = {m.get("id"): m for m in models}
        if not served:
            raise RemoteEngineError(f"the LLM server at {self.url} serves no model")
        if self.model is None:
            self.model = next(iter(served))
        elif self.model not in served:
            raise RemoteEngineError(f"the LLM server at {self.url} does not serve {self.model!r} "
                                    f"(it serves {', '.join(sorted(served))})")
        root = served[self.model].get("root")
        if root and Path(root).is_dir():  # the server runs from a folder this machine can read too
            self.model_root = Path(root).resolve()
        self.description = f"remote engine at {self.url} ({self.model})"

    def _request(self, prompt: EnginePrompt, sampling: SamplingSettings) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": sampling.max_tokens,
                                "temperature": sampling.temperature, "stream": True,
                                "stream_options": {"include_usage": True}}
        if prompt.stop:
            body["stop"] = list(prompt.stop)
        if prompt.text is not None and not prompt.has_media:
            if sampling.json_schema:  # a vLLM server's own extension (a required tool call)
                body["structured_outputs"] = {"json": json.loads(sampling.json_schema)}
            return "completions", {**body, "prompt": prompt.text}
        return "chat/completions", {**body, "messages": openai_messages(prompt)}

    async def stream(self, prompt: EnginePrompt, sampling: SamplingSettings,
                     request_id: str) -> AsyncIterator[Delta]:
        import aiohttp

        endpoint, body = self._request(prompt, sampling)
        for attempt in (1, 2):
            try:
                response = await self.http.post(f"{self.url}/{endpoint}", json=body,
                                                headers={"X-Request-Id": request_id})
                break
            except aiohttp.ServerDisconnectedError:  # a kept-alive connection the server had just closed
                if attempt == 2:
                    raise RemoteEngineError(f"the LLM server at {self.url} closed the connection") from None
            except aiohttp.ClientError as exc:
                raise RemoteEngineError(f"the LLM server at {self.url} is unreachable "
                                        f"({exc.__class__.__name__})") from exc
        try:
            if response.status != 200:
                detail = (await response.text())[:300]
                raise RemoteEngineError(f"the LLM server answered HTTP {response.status}: {detail}")
            async for raw in response.content:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                delta = self._delta(json.loads(data))
                if delta is not None:
                    yield delta
        except aiohttp.ClientError as exc:
            raise RemoteEngineError(f"the LLM server at {self.url} broke the stream ({exc.__class__.__name__})") \
                from exc
        finally:
            response.close()  # drops the connection: the server aborts an unfinished request

    @staticmethod
    def _delta(chunk: dict[str, Any]) -> Delta | None:
        if "error" in chunk:
            raise RemoteEngineError(f"the LLM server failed: {chunk['error']}")
        usage = chunk.get("usage")
        if usage:
            return Delta("", int(usage.get("completion_tokens") or 0), int(usage.get("prompt_tokens") or 0))
        choices = chunk.get("choices") or []
        if not choices:
            return None
        choice = choices[0]
        text = choice.get("text")
        if text is None:
            text = (choice.get("delta") or {}).get("content") or ""
        return Delta(text) if text else None

    def healthy(self) -> bool:
        return True  # a server that fails fails each request: the turn gets the error, the worker lives on

    async def wait_failed(self) -> BaseException:
        await asyncio.Event().wait()  # never set
        raise AssertionError("unreachable")

    async def abort(self, request_id: str) -> None:
        """Nothing to send: the stream is closed by the cancelled task (see ``stream``)."""

    async def aclose(self) -> None:
        if self.http is not None:
            http, self.http = self.http, None
            await http.close()

    def close(self) -> None:
        self.http = None  # the loop has ended; aclose() is the clean path
