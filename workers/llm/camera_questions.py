"""Whether a question is about what the camera shows, and what the model is told when it cannot see.

A text-only model asked "What am I holding?" with no picture invents one ("I'm holding up a book."). When the
camera is off, or shows nothing the question asks about, the model is told so beside the question, and says it.
Questions that are not about the camera get no note: the answer to "What is the capital of Italy?" must not
change because a camera is on.
"""

from __future__ import annotations

import re

_ABOUT_CAMERA = re.compile(
    r"\b("
    # seeing and showing
    r"(can|do|did|could) you see|what do you see|what can you see|look(ing)? at (this|that|me|it|my)|take a look|"
    r"camera|in (the|this) (picture|photo|image|frame|video)|in front of (me|you|the camera)|"
    r"(i'?m|i am|am i) (holding|showing|wearing|pointing|doing)|what am i\b|showing you|(hold|holding) (up|this)|"
    r"in my hands?|on my (shirt|screen|table|desk|hand)|do i look|how do i look|"
    # text in the picture
    r"what (does|do) (this|that|it|these|the \w+)( \w+)? (say|read)|read (this|that|it)\b|read me (this|that|what)|"
    r"what('s| is) written|"
    r"what('s| is) on (this|that|the|my) (sign|label|page|screen|card|paper|note|board|box|can|bottle|shirt)|"
    # objects, people, hands
    r"what( is|'s| are) (this|that|these|those)\b|who( is|'s) (this|that)|what colou?r( is|'s| are) (this|that|it|my)|"
    r"how many (fingers|hands) (am i|do i|i'?m|are (up|raised|shown))|how many fingers\b.*\b(up|showing|holding)|"
    r"how many (people|persons|faces) (do|can) you see|how many (people|persons|faces) are (here|in (the|this))|"
    r"how many of us|thumbs? up|am i (waving|pointing|smiling)"
    r")"
    r"|\b(this|these)\W*$", re.I)

# Words to the model beside a question about the camera (measured wordings: docs/vision.md).
# A camera question whose picture is not analysed within vision.wait_ms, and nothing earlier of that camera is.
STILL_LOOKING = "I'm still looking at the picture. Ask me again in a moment."
CAMERA_SHOWS = "Vita's camera shows, right now: {seen}. Answer the user's question from this only."
MAX_QUESTION_CHARS = 300  # what is looked at of a question (spaces collapsed): a camera question is short

CAMERA_OFF = ("Vita's camera is off: Vita cannot see anything now. If the user asks what Vita sees, say that the "
              "camera is off.")


def asks_about_camera(question: str) -> bool:
    """True when answering needs the picture: "what does the sign say", "what am I holding", "how many fingers"."""
    return bool(_ABOUT_CAMERA.search(" ".join((question or "").split())[:MAX_QUESTION_CHARS]))
