"""What the turn-taking benchmark plays: the questions, paused requests, backchannels, noises, interruptions and
commands, the plan of trials made from them for the kinds and voices asked, and the speech synthesised ahead."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable

from scripts.bench.turns.sounds import SOUNDS, say
from scripts.bench.turns.trials import (
    command_over_reply,
    complete_question,
    interruption,
    paused_request,
    sound_over_reply,
)
from scripts.eval.questions import E2E_LONG_QUESTIONS

# General questions, not chosen for (or tuned on) anything.
QUESTIONS = ["What is the capital of France?", "How many legs does a spider have?", "Who wrote Romeo and Juliet?",
             "What color is the sky on a clear day?", "How many days are in a week?",
             "What is the largest planet in our solar system?", "Can you recommend a good book?",
             "Where do penguins live?", "How do I boil an egg?", "Is a tomato a fruit?", "What is two plus three?",
             "What time zone is London in?"]
# (first part, second part): one request said with a pause inside.
PAUSED = [("My name is Anna.", "Please remember it."),
          ("What is the capital of Canada?", "Keep it short."),
          ("I was wondering", "what the biggest ocean is."),
          ("Tell me a fact about the moon.", "Something surprising."),
          ("Can you help me", "with a recipe for pancakes?"),
          ("I need to know", "how far away the sun is."),
          ("What's the weather like in spring?", "In Japan, I mean."),
          ("I have a cat named Max.", "What should I feed him?"),
          ("How long should I", "boil an egg for?")]
QUICK_PAUSED = PAUSED[1:3]  # one whose first part is a whole sentence, one whose first part is not
PAUSES_S = (0.4, 0.8, 1.2, 1.5)
BACKCHANNELS = ["Mm-hmm.", "Yeah.", "Uh-huh.", "Okay.", "Right."]
NOISES = ("cough", "knock", "clap", "typing")
NOISE_VARIANTS = 5  # per category and --trials in a full run (1 with --quick)
INTERRUPTIONS = ["Wait, stop. What about Germany instead?", "Hold on, stop. What about Spain?",
                 "Sorry, stop there. Tell me about Italy instead.", "No, wait. What about Japan?"]
COMMANDS = ["Stop.", "Wait.", "Hold on.", "No, stop."]  # voiced about as long as a backchannel: heard by the ASR
INTERRUPTION_LEADS_S = (0.5, 1.7, 3.1)  # interruptions start at different moments of the multi-piece reply


def plan(args: argparse.Namespace, voices: list[str]) -> dict[str, list[tuple[str, str, Callable]]]:
    """(group title, trial label, job) per kind; each job takes a client and returns its row."""
    n = max(1, args.trials)
    kinds = set(args.kinds.split(","))
    questions = QUESTIONS[:4] if args.quick else QUESTIONS
    paused = QUICK_PAUSED if args.quick else PAUSED
    variants = 1 if args.quick else NOISE_VARIANTS
    backchannels = BACKCHANNELS[::2] if args.quick else BACKCHANNELS
    interruptions = INTERRUPTIONS[:2] if args.quick else INTERRUPTIONS
    partial = functools.partial
    jobs: dict[str, list] = {"complete": [], "paused": [], "sounds": [], "interruptions": [], "commands": []}
    for voice in voices:
        for rep in range(n):
            if "1" in kinds:
                jobs["complete"] += [(f"complete questions, {voice}", f"{q} (#{rep + 1})",
                                      partial(complete_question, voice=voice, text=q)) for q in questions]
            if "2" in kinds:
                jobs["paused"] += [(f"paused requests, {voice}", f"{a} / {pause:.1f} s / {b}",
                                    partial(paused_request, voice=voice, first=a, second=b, pause_s=pause))
                                   for a, b in paused for pause in PAUSES_S]
            if "4" in kinds:
                leads = INTERRUPTION_LEADS_S[:1] if args.quick else INTERRUPTION_LEADS_S
                jobs["interruptions"] += [(f"interruptions, {voice}", f"{text} ({lead:.1f} s in)",
                                           partial(interruption, voice=voice, text=text, lead_s=lead))
                                          for text in interruptions for lead in leads]
                jobs["commands"] += [(f"one-word commands, {voice}", text,
                                      partial(command_over_reply, voice=voice, text=text))
                                     for text in (COMMANDS[:2] if args.quick else COMMANDS)]
    if "3" in kinds:
        asked = 0  # the long questions are taken in turn
        for seed in range(n * variants):
            for name in NOISES:
                jobs["sounds"].append(("sounds over a reply, noises", f"{name} #{seed + 1}", partial(
                    sound_over_reply, category=name, label=f"{name} seed {seed}", sound=SOUNDS[name](seed),
                    question=E2E_LONG_QUESTIONS[asked % len(E2E_LONG_QUESTIONS)])))
                asked += 1
        for voice in voices:
            for rep in range(n):
                for text in backchannels:
                    jobs["sounds"].append((f"sounds over a reply, backchannels, {voice}", f"{text} #{rep + 1}", partial(
                        sound_over_reply, category=f"backchannel {voice}", label=text, sound=say(voice, text),
                        question=E2E_LONG_QUESTIONS[asked % len(E2E_LONG_QUESTIONS)])))
                    asked += 1
    return jobs


def synthesize_all(voices: list[str], quick: bool) -> None:
    """Everything the voices will say, made before the trials (while the server loads)."""
    texts = [*(QUESTIONS[:4] if quick else QUESTIONS), *(BACKCHANNELS[::2] if quick else BACKCHANNELS),
             *(INTERRUPTIONS[:2] if quick else INTERRUPTIONS)]
    for voice in voices:
        for text in texts:
            say(voice, text)
        for a, b in QUICK_PAUSED if quick else PAUSED:
            say(voice, a, trim=True)
            say(voice, b, trim=True)
