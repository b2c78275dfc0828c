"""Which questions are about the camera (pure logic)."""

from __future__ import annotations

import pytest

from workers.llm.camera_questions import asks_about_camera

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
