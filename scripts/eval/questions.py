"""The question sets: the evaluations' (questions.json: each question says which words make it right; 'tune'
questions may be used to choose prompts and settings, 'report' ones only to report) and the benchmarks' short
lists."""

from __future__ import annotations

import json
from pathlib import Path

QUESTIONS = Path(__file__).with_name("questions.json")


def load_questions(which: str) -> list[dict]:
    qs = json.loads(QUESTIONS.read_text())["questions"]
    return [q for q in qs if which == "all" or q["set"] == which]


def plain_questions() -> list[dict]:
    """The report set's questions that stand alone: no follow-up, no camera (what a tool must leave alone)."""
    return [q for q in load_questions("report") if not q.get("after") and not q.get("camera")]


# --- typed: the LLM alone -------------------------------------------------------------------------------------
def chains(questions: list[dict]) -> list[list[dict]]:
    """Questions grouped so each follow-up comes right after the question it needs."""
    by_id, groups, where = {q["id"]: q for q in questions}, [], {}
    for q in questions:
        if q.get("after") in by_id and q["after"] in where:
            where[q["id"]] = where[q["after"]]
            groups[where[q["id"]]].append(q)
        else:
            where[q["id"]] = len(groups)
            groups.append([q])
    return groups


# --- the benchmarks' questions -------------------------------------------------------------------------------
# Short factual questions (one answer each) and longer ones (several clauses: where streaming pays).
SHORT = ["What is the capital of France?", "How many legs does a spider have?", "What color is the sky?",
         "Is a whale a mammal?", "What is two plus three?", "Who wrote Romeo and Juliet?",
         "What is the largest planet?", "How many days are in a week?", "What do bees make?",
         "What is the opposite of hot?", "Which ocean is the largest?", "What is frozen water called?"]
LONG = ["Tell me three things about the planet Mars.", "Describe a rainbow in two sentences.",
        "Give me three tips for sleeping better.", "Tell me a short story about a brave little dog.",
        "Explain in two sentences how a bicycle works.", "Describe a summer day at the beach in three sentences.",
        "What are three good habits for a healthy life?", "Tell me about cats, dogs and birds."]
# A long reply to interrupt, and what interrupts it.
BARGE_OVER = "Tell me a short story about a brave little dog."
BARGE_WITH = "Wait, stop. What is the capital of Spain?"

# The end-to-end benchmark's own (see its docstring).
E2E_QUESTIONS = ["What is the capital of France?", "Hello, how are you today?", "Please tell me a joke about cats.",
                 "Can you tell me what the weather is like in spring?"]
# The bundled model answers the questions above in one short sentence, where streaming has nothing to overlap;
# these it answers in several clauses (see tests/workers/llm/test_llm_worker.py), which is where streaming pays.
E2E_LONG_QUESTIONS = ["Can you tell me, in detail, what the weather is like in spring, summer, autumn and winter?",
                      "Give me three tips for sleeping better, please.", "Tell me about dogs, cats and birds."]
E2E_TYPED_LONG = ["Good morning, Vita! Can you tell me, in detail, what the weather is like in spring, summer, "
                  "autumn and winter?", "Give me three tips for sleeping better, please.",
                  "Tell me about dogs, cats and birds."]
