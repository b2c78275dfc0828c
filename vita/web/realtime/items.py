"""What a Realtime client's items hold, read and checked before anything of them is decoded or charged: a user
message's content parts (text, audio, images), and the part of a reply an interrupted listener heard."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vita.messages import Picture
from vita.pictures import FrameError, FrameOverBudget, decode_frame
from vita.rate_budget import RateBudget
from vita.web.realtime.protocol import MAX_CONTENT_PARTS, ProtocolError

IMAGE_DETAILS = ("auto", "low", "high")
MAX_IMAGES_PER_ITEM = 4  # input_image parts waiting for one response (each is decoded on the connection's thread)


@dataclass
class MessageContent:
    parts: list[dict[str, Any]] = field(default_factory=list)  # the item's content as the conversation shows it
    clips: list[str] = field(default_factory=list)  # base64 audio, in order: decoded once the whole is charged
    images: list[Picture] = field(default_factory=list)  # the pictures, checked

    @property
    def text(self) -> str:
        return " ".join(p["text"].strip() for p in self.parts if p["type"] == "input_text")


def read_message_content(content: Any, images_waiting: int, max_frame_bytes: int,
                         max_image_pixels: int, image_budget: RateBudget | None = None) -> MessageContent:
    """A user message's parts, each checked (a readable error naming the part otherwise); images decoded (at most
    MAX_IMAGES_PER_ITEM with those already waiting for the response)."""
    if not isinstance(content, list) or not content:
        raise ProtocolError("invalid_value", "a message needs a list of content parts", "item.content")
    if len(content) > MAX_CONTENT_PARTS:  # refused before any part is looked at
        raise ProtocolError("too_many_parts", f"a message may have at most {MAX_CONTENT_PARTS} content parts, not "
                            f"{len(content)}", "item.content")
    read = MessageContent()
    for n, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "text"):
            text = part.get("text")
            if not isinstance(text, str) or not text.strip():
                raise ProtocolError("invalid_value", "input_text needs some text", f"item.content[{n}].text")
            # (kept stripped: the item is kept, echoed and retrievable, and 1.9 MB of spaces around one letter
            # passed the length check, which counts what the model reads)
            read.parts.append({"type": "input_text", "text": text.strip()})
        elif kind == "input_audio":
            if not isinstance(part.get("audio"), str):
                raise ProtocolError("invalid_value", "audio must be a base64 string", f"item.content[{n}].audio")
            read.clips.append(part["audio"])
            read.parts.append({"type": "input_audio", "transcript": None})
        elif kind == "input_image":
            url, detail = part.get("image_url"), part.get("detail", "auto")
            if detail not in IMAGE_DETAILS:  # (kept with the item: anything else was kept as sent, megabytes)
                raise ProtocolError("invalid_value", f"detail must be one of {', '.join(IMAGE_DETAILS)}",
                                    f"item.content[{n}].detail")
            if not isinstance(url, str) or not url.startswith("data:"):
                raise ProtocolError("unsupported", "image_url must be a data URL (data:image/jpeg;base64,...): "
                                    "this server fetches no images", f"item.content[{n}].image_url")
            if len(read.images) + images_waiting >= MAX_IMAGES_PER_ITEM:
                raise ProtocolError("too_many_images", f"at most {MAX_IMAGES_PER_ITEM} images may wait for one "
                                    "response", f"item.content[{n}]")
            try:
                read.images.append(decode_frame(url, max_frame_bytes, max_image_pixels, image_budget))
            except FrameOverBudget as exc:
                raise ProtocolError("rate_limited", str(exc), f"item.content[{n}].image_url") from None
            except FrameError as exc:
                raise ProtocolError("invalid_value", str(exc).replace("video_frame", "input_image"),
                                    f"item.content[{n}].image_url") from None
            read.parts.append({"type": "input_image", "detail": detail})
        else:
            raise ProtocolError("unsupported", "content parts may be input_text, input_audio or input_image",
                                f"item.content[{n}].type")
    return read


def heard_part(text: str, fraction: float) -> str:
    """The words of a reply heard up to `fraction` of its audio (by characters: speech runs at a steady rate)."""
    if fraction >= 1.0:
        return text
    cut = int(len(text) * max(0.0, fraction))
    if cut < len(text) and cut > 0 and not text[cut - 1].isspace() and not text[cut].isspace():
        cut = text.rfind(" ", 0, cut) + 1  # the word being said is not kept
    return text[:cut].rstrip()
