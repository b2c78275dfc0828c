"""Prompt styles, with a real base tokenizer (bundled Gemma) and a real chat template."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from vita.config import Config
from vita.prompting import ConversationHistory, Exchange, PromptBuilder

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def base_tokenizer():
    return AutoTokenizer.from_pretrained(str(Config().llm_model_path()))


def test_base_model_gets_transcript_continuation(base_tokenizer):
    builder = PromptBuilder(base_tokenizer, "auto", "Vita is brief.")
    assert builder.style == "transcript"
    history = ConversationHistory(4)
    history.add(Exchange("Hi there", "Hello!"))
    prompt = builder.build(history, "What is the capital of France?")
    assert prompt.endswith("User: Hi there\nVita: Hello!\nUser: What is the capital of France?\nVita:")
    assert "\n" in builder.stop


def test_instruct_tokenizer_gets_its_chat_template(base_tokenizer):
    base_tokenizer.chat_template = CHAT_TEMPLATE
    try:
        builder = PromptBuilder(base_tokenizer, "auto", "Be brief.")
        assert builder.style == "chat"
        history = ConversationHistory(4)
        history.add(Exchange("Hi", "Hello, half", interrupted=True))
        prompt = builder.build(history, "Again?", cues="camera on: one person is facing the camera")
        assert prompt == ("<|system|>Be brief.\n<|user|>Hi\n<|assistant|>Hello, half [interrupted by the user]\n"
                          "<|user|>Again? (camera on: one person is facing the camera)\n<|assistant|>")
        assert builder.stop == []
    finally:
        base_tokenizer.chat_template = None


def test_history_keeps_only_the_limit():
    history = ConversationHistory(2)
    for i in range(5):
        history.add(Exchange(f"q{i}", f"a{i}"))
    assert [e.user for e in history] == ["q3", "q4"]
