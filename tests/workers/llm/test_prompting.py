"""Prompt styles, with a real tokenizer (the bundled default's, its chat template taken away to make it a base
model's) and a real chat template."""

from __future__ import annotations

import pytest

from vita.config import Config
from workers.llm.camera_questions import PICTURE_CLOSE, PICTURE_OPEN
from workers.llm.prompting import ConversationHistory, Exchange, PromptBuilder, tool_section

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture
def base_tokenizer():
    from transformers import AutoTokenizer  # here: the fast lane collects this module and runs none of it

    tokenizer = AutoTokenizer.from_pretrained(str(Config().llm_model_path()))
    tokenizer.chat_template = None  # what a base model's tokenizer looks like
    return tokenizer


def test_base_model_gets_transcript_continuation(base_tokenizer):
    builder = PromptBuilder(base_tokenizer, "auto", "Vita is brief.")
    assert builder.style == "transcript"
    history = ConversationHistory(4)
    history.add(Exchange("Hi there", "Hello!"))
    prompt = builder.build(history, "What is the capital of France?")
    assert prompt.endswith("User: Hi there\nVita: Hello!\nUser: What is the capital of France?\nVita:")
    assert "\n" in builder.stop
    assert "Rome" not in prompt and "capital of Italy" not in prompt  # no fact to copy into unrelated answers


def test_instruct_tokenizer_gets_its_chat_template(base_tokenizer):
    base_tokenizer.chat_template = CHAT_TEMPLATE
    try:
        builder = PromptBuilder(base_tokenizer, "auto", "Be brief.")
        assert builder.style == "chat"
        history = ConversationHistory(4)
        history.add(Exchange("Hi", "Hello, half", interrupted=True))
        prompt = builder.build(history, "Again?", cues="camera: one person, looking at the camera")
        assert prompt == ("<|system|>Be brief.\n<|user|>Hi\n<|assistant|>Hello, half…\n"
                          f"<|user|>Again?\n\n{PICTURE_OPEN}one person, looking at the camera{PICTURE_CLOSE}Again?\n"
                          "<|assistant|>")
        assert builder.stop == []
    finally:
        base_tokenizer.chat_template = None


def test_history_keeps_at_most_the_limit_dropping_the_older_half_at_once():
    history = ConversationHistory(4)
    seen = []
    for i in range(9):
        history.add(Exchange(f"q{i}", f"a{i}"))
        seen.append([e.user for e in history])
    assert max(len(s) for s in seen) == 4 and seen[-1][-1] == "q8"
    assert seen[4] == ["q2", "q3", "q4"] and seen[5] == ["q2", "q3", "q4", "q5"] and seen[6] == ["q4", "q5", "q6"]
    # Between two trims each history starts with the whole previous one: the engine's prefix cache keeps it.
    grew = sum(1 for before, after in zip(seen, seen[1:], strict=False) if after[:len(before)] == before)
    assert grew >= len(seen) // 2 + 1


def test_history_is_bounded_by_tokens_keeping_the_newest(base_tokenizer):
    builder = PromptBuilder(base_tokenizer, "transcript", "Vita is brief.", history_tokens=40)
    history = ConversationHistory(10)
    for i in range(6):
        history.add(Exchange(f"Question number {i} about something quite long?", f"Answer number {i} to it."))
    prompt = builder.build(history, "Last?")
    kept = [i for i in range(6) if f"Question number {i} " in prompt]
    assert kept and kept == list(range(kept[0], 6)) and kept[0] > 0  # the newest, contiguous; the oldest dropped
    assert len(base_tokenizer("".join(f"Question number {i} about something quite long?Answer number {i} to it."
                                      for i in kept))["input_ids"]) <= 40 + len(kept) * 2


STOCK_TOOL = [{"type": "function", "function": {
    "name": "stock_count", "description": "How many of an item the shop has in stock.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}}}]


@pytest.fixture
def chat_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Config().llm_model_path()))  # Qwen2.5's template, with its tools part


def test_tools_are_offered_in_the_templates_own_words_just_before_the_question(chat_tokenizer):
    builder = PromptBuilder(chat_tokenizer, "auto", "Vita is brief.")
    history = ConversationHistory(4)
    history.add(Exchange("What is the capital of France?", "Paris."))
    plain = builder.build(history, "How many widgets are in stock?")
    offered = builder.build(history, "How many widgets are in stock?", tools=STOCK_TOOL)
    section = tool_section(chat_tokenizer, STOCK_TOOL)
    assert section.startswith("# Tools") and '"stock_count"' in section and "<tool_call>" in section
    question = "<|im_start|>user\nHow many widgets are in stock?"
    # The persona and the history are the prefix they were without tools (the engine's prefix cache keeps them);
    # the tools come after, in a system message of their own, right before the question.
    assert offered.startswith(plain[:plain.index(question)])
    assert offered[len(plain[:plain.index(question)]):] == (f"<|im_start|>system\n{section}<|im_end|>\n"
                                                             + plain[plain.index(question):])
    assert "# Tools" not in plain and offered.count("# Tools") == 1


ORDER_TOOL = [{"type": "function", "function": {
    "name": "get_order_status", "description": "Where a customer's order is.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]


def test_a_sessions_fixed_tools_are_in_its_system_prompt_every_turn_and_the_others_beside_the_question(
        chat_tokenizer):
    """A client's functions are the same all session: in the cached prefix, not prefilled again each turn."""
    builder = PromptBuilder(chat_tokenizer, "auto", "Vita is brief.")
    first = builder.build(ConversationHistory(4), "Hello!", fixed_tools=ORDER_TOOL)
    history = ConversationHistory(4)
    history.add(Exchange("Hello!", "Hi! How can I help?"))
    later = builder.build(history, "How many widgets are in stock?", tools=STOCK_TOOL, fixed_tools=ORDER_TOOL)
    system = first[:first.index("<|im_start|>user")]
    assert '"get_order_status"' in system and later.startswith(system)  # the same prefix, whatever is asked
    beside = later[len(system):]
    assert '"get_order_status"' not in beside and beside.index('"stock_count"') < beside.index("How many widgets")


def test_a_note_about_the_question_goes_just_before_it_after_any_tools(chat_tokenizer):
    builder = PromptBuilder(chat_tokenizer, "auto", "Vita is brief.")
    history = ConversationHistory(4)
    history.add(Exchange("What is the capital of France?", "Paris."))
    plain = builder.build(history, "We chose to rise?")
    noted = builder.build(history, "We chose to rise?", note="The words may be misheard.")
    both = builder.build(history, "We chose to rise?", tools=STOCK_TOOL, note="The words may be misheard.")
    prefix = plain[:plain.index("<|im_start|>user\nWe chose")]
    assert noted == prefix + "<|im_start|>system\nThe words may be misheard.<|im_end|>\n" + plain[len(prefix):]
    assert both.startswith(prefix) and both.index("# Tools") < both.index("misheard") < both.index("We chose")


def test_the_words_are_found_in_tokens_from_the_end_of_the_prompt(chat_tokenizer, base_tokenizer):
    """The engine reads the user's words by their place counted from the prompt's end; the same words earlier in
    the history, a note, tools or camera cues do not move it."""
    for tokenizer, style in ((chat_tokenizer, "auto"), (base_tokenizer, "transcript")):
        builder = PromptBuilder(tokenizer, style, "Vita is brief.")
        history = ConversationHistory(4)
        history.add(Exchange("Is my murder flying insect?", "Sorry?"))
        for kwargs in ({}, {"note": "The words may be misheard."}, {"cues": "a red mug"}):
            text = builder.build(history, "Is my murder flying insect?", **kwargs)
            words, after = builder.words_from_end(text, "Is my murder flying insect?", kwargs.get("cues", ""))
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            # What is read: the words and the token after them (the end of the turn; in a transcript "?\n" is one)
            read = tokenizer.decode(ids[len(ids) - after - words:len(ids) - after + 1])
            assert read.strip().startswith("Is my murder flying insect"), (style, kwargs, read)
            assert len(read.strip()) <= len("Is my murder flying insect?") + len("<|im_end|>"), (style, kwargs, read)
    assert PromptBuilder(None, "chat", "Vita.").words_from_end("anything", "Hello") is None


def test_a_template_without_a_tools_part_gets_them_where_it_puts_them(base_tokenizer):
    base_tokenizer.chat_template = CHAT_TEMPLATE  # writes no tools at all
    try:
        assert tool_section(base_tokenizer, STOCK_TOOL) == ""
        builder = PromptBuilder(base_tokenizer, "auto", "Be brief.")
        assert builder.build(ConversationHistory(4), "Widgets?", tools=STOCK_TOOL) == (
            "<|system|>Be brief.\n<|user|>Widgets?\n<|assistant|>")
    finally:
        base_tokenizer.chat_template = None


# Llama 3.1's way: the tools go into the first user message, not the system prompt.
TOOLS_IN_USER_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if loop.index0 == 1 and tools %}Tools: {{ tools | tojson }}\n{% endif %}{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Tools in the system prompt, and every later system message dropped without a word.
DROPS_LATER_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] != 'system' or loop.first %}<|{{ m['role'] }}|>{{ m['content'] }}"
    "{% if loop.first and tools %} Tools: {{ tools | tojson }}{% endif %}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_a_template_that_puts_tools_in_the_first_user_message_gets_them_there_every_turn(base_tokenizer):
    base_tokenizer.chat_template = TOOLS_IN_USER_TEMPLATE
    try:
        builder = PromptBuilder(base_tokenizer, "auto", "Be brief.")
        assert tool_section(base_tokenizer, STOCK_TOOL) == "" and not builder.tools_beside
        prompt = builder.build(ConversationHistory(4), "Widgets?", tools=STOCK_TOOL)
        assert prompt.startswith("<|system|>Be brief.\n<|user|>Tools: [") and '"stock_count"' in prompt
        noted = builder.build(ConversationHistory(4), "Widgets?", tools=STOCK_TOOL, note="Maybe misheard.")
        assert '"stock_count"' in noted and "Maybe misheard." in noted  # a note beside them drops no tool
    finally:
        base_tokenizer.chat_template = None


def test_a_template_that_drops_a_later_system_message_keeps_the_tools_where_it_puts_them(base_tokenizer):
    base_tokenizer.chat_template = DROPS_LATER_SYSTEM_TEMPLATE
    try:
        builder = PromptBuilder(base_tokenizer, "auto", "Be brief.")
        assert builder.tools_beside  # its system prompt shows where tools go...
        prompt = builder.build(ConversationHistory(4), "Widgets?", tools=STOCK_TOOL)
        assert prompt.startswith("<|system|>Be brief. Tools: [") and '"stock_count"' in prompt  # ...kept there
    finally:
        base_tokenizer.chat_template = None


def test_the_fixed_prefix_ends_where_a_first_prompt_starts_to_differ(chat_tokenizer):
    builder = PromptBuilder(chat_tokenizer, "auto", "Vita is brief.")
    fixed = builder.fixed_prefix_tokens()
    prompt = builder.build(ConversationHistory(4), "Anything at all?")
    ids = chat_tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert chat_tokenizer.decode(ids[:fixed]).endswith("Vita is brief.<|im_end|>\n<|im_start|>")
    longer = PromptBuilder(chat_tokenizer, "auto", "Vita is brief and kind.").fixed_prefix_tokens()
    assert longer == fixed + len(chat_tokenizer(" and kind", add_special_tokens=False)["input_ids"])
    with_tools = builder.fixed_prefix_tokens(STOCK_TOOL)  # tools in the prompt's usual place: part of the prefix
    assert with_tools > fixed + len(chat_tokenizer('"stock_count"', add_special_tokens=False)["input_ids"])


def test_a_transcript_prompts_fixed_prefix_is_its_persona_and_examples(base_tokenizer):
    builder = PromptBuilder(base_tokenizer, "transcript", "Vita is brief.")
    fixed = builder.fixed_prefix_tokens()
    prompt = builder.build(ConversationHistory(4), "Anything at all?")
    ids = base_tokenizer(prompt)["input_ids"]
    assert "Vita is brief." in base_tokenizer.decode(ids[:fixed])
    assert base_tokenizer.decode(ids[fixed:]).strip().startswith(("User: Anything", ": Anything", "Anything"))


def test_the_default_persona_fills_a_whole_cache_block_so_first_turns_share_it(chat_tokenizer):
    config = Config()
    builder = PromptBuilder(chat_tokenizer, config.llm.prompt_style, config.llm.persona)
    assert builder.fixed_prefix_tokens() >= config.llm.block_size
