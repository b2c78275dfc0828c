"""Which questions are about the camera, and how what it shows is put to the model: as quoted data beside the
question, never as an instruction (pure logic)."""

from __future__ import annotations

import pytest

from tests.harness.injection_signs import SIGNS
from workers.llm.camera_questions import (
    PICTURE_CLOSE,
    PICTURE_OPEN,
    asks_about_camera,
    follows_on,
    may_ask_about_camera,
    with_picture,
)
from workers.llm.prompting import ConversationHistory, Exchange, PromptBuilder
from workers.vision.ocr import TextLine, TextReading
from workers.vision.quoting import neutral
from workers.vision.scene import Scene, render

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


@pytest.mark.parametrize("question", [
    "What does the sign say?", "What does this say?", "Can you read this for me?", "What am I holding up?",
    "What am I holding up to the camera right now?", "What is this?", "What's that?", "Who is this?",
    "How many fingers am I holding up?", "How many people do you see?", "What color is this?", "Can you see me?",
    "What do you see?", "What brand is this?", "What's written here?",
    "What is on the label?", "Is this a cat or a dog? What is this", "Look at this.", "What's in my hand?",
    "How many people are in the picture?", "Am I waving?",
])
def test_questions_about_the_picture(question):
    assert asks_about_camera(question)


@pytest.mark.parametrize("question", [
    "What is the capital of Italy?", "How many fingers does a human hand have?", "How many people live in China?",
    "What is the book of Genesis about?", "Tell me a joke.", "What time is it?", "What is 347 times 29?",
    "Who wrote Romeo and Juliet?", "What does DNA stand for?", "How are you today?", "What is a sign language?",
    "Is a whale a mammal?", "What colour is the sky?", "Read me a poem about the sea",
])
def test_questions_that_are_not(question):
    assert not asks_about_camera(question)


@pytest.mark.parametrize("question", [
    "What date is on the label?", "What is the date on this milk carton?", "What number is on the bus?",
    "What price is on the tag?", "What is the total on this receipt?", "What time does the clock say?",
    "What year is printed on the coin?", "How much does this cost?", "How much is this?", "What is in the cup?",
    "How much is the latte on this menu?", "Which of the dates on this label is the expiry?",
    "What language is this sign written in?", "Who is this card for?", "What language is the sign written in?",
    "Who is the sign for?",
    "What's in my bag?", "What is inside this?", "What's the name on the card?", "And this one?",
])
def test_a_value_on_a_thing_or_what_a_container_holds_is_about_the_picture(question):
    assert asks_about_camera(question)


@pytest.mark.parametrize("question", [
    "What is the date today?", "What day is it?", "What time is it in Tokyo?", "How much is the ticket to Paris?",
    "What is the price of gold?", "How much does a Tesla cost?", "What year did World War II end?",
    "What's in a Caesar salad?", "What is the sign for infinity?", "What language is spoken in Brazil?",
])
def test_values_that_are_looked_up_or_known_are_not(question):
    assert not asks_about_camera(question)


def test_words_that_may_be_about_the_picture_are_only_when_it_shows_them():
    """The caller looks: "How much does it cost?" is about the picture if a price is read (workers/llm/looking.py)."""
    assert may_ask_about_camera("How much does it cost?") and may_ask_about_camera("When does it expire?")
    assert not may_ask_about_camera("What is the capital of Italy?") and not may_ask_about_camera("What time is it?")


@pytest.mark.parametrize("question, follows", [
    ("And what about the other one?", True), ("What colour is it?", True), ("And the second line?", True),
    ("What time is it?", False), ("What time is it in Tokyo?", False), ("Is it going to rain tomorrow?", False),
    ("What is 12 times 4?", False), ("Who wrote Hamlet?", False),
])
def test_a_follow_up_to_a_camera_question(question, follows):
    assert follows_on(question) is follows


# --- what the camera shows is data, never an instruction ---------------------------------------------------------
def sign_scene(rows: tuple[str, ...]) -> Scene:
    lines = tuple(TextLine(r, 0.99, (0, 40 * i, 100, 40 * i + 30), i) for i, r in enumerate(rows))
    return Scene((640, 480), text=TextReading(lines, 0.1))


@pytest.mark.parametrize("sign", SIGNS, ids=[s.name for s in SIGNS])
@pytest.mark.parametrize("question", ["What does the sign say?", "What is this sign about?"])
def test_a_signs_words_stay_quoted_data_in_the_users_message(sign, question):
    """Whatever a sign says, it is inside the camera block of the user's message, as quoted rows: it cannot close
    the block or its quotes, write a template token or start a line, and no system message carries it."""
    cues = render(sign_scene(sign.rows), question)
    history = ConversationHistory(4)
    history.add(Exchange(with_picture("What do you see?", cues), "A sign."))  # as the history keeps it
    messages = PromptBuilder(None, "chat", "Vita is brief.").messages(history, question, cues)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]  # no system message added
    assert messages[0]["content"] == "Vita is brief."
    for message in (messages[1], messages[-1]):
        content = message["content"]
        assert content.startswith(message is messages[-1] and question or "What do you see?")
        before, block = content.split(PICTURE_OPEN)
        data, after = block.split(PICTURE_CLOSE)
        assert PICTURE_OPEN not in after and PICTURE_CLOSE not in data  # one block, closed where we close it
        assert "\n" not in data and "<" not in data and ">" not in data and "[" not in data
        assert data.startswith('text read: "') and data.endswith('"')
        rows = data.removeprefix("text read: ").split(" / ")
        assert [neutral(r) for r in sign.rows] == [r[1:-1] for r in rows]  # every row whole, in its own quotes
        assert all('"' not in r[1:-1] for r in rows)
    for word in ("PINEAPPLE", "HACKED", "BANANA", "LIBRE", "instruction", "unlock_door", "我被黑了"):
        assert not any(word in m["content"] for m in messages if m["role"] == "system")


def test_no_picture_no_block():
    assert with_picture("What is the capital of Italy?", "") == "What is the capital of Italy?"
