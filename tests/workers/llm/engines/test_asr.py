"""Whisper's encoder window: pure logic, and the real model hearing real speech over the short window."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.harness.speech import noise, silence, spoken
from vita.config import Config
from vita.words import after_stop_command
from workers.llm.engines.asr import (
    MisheardRule,
    Transcription,
    WhisperTranscriber,
    threads_from,
    threads_worth_it,
    window_seconds,
    without_repeats,
    word_error_rate,
)


@pytest.mark.fast
@pytest.mark.parametrize(("audio_s", "short", "window"), [
    (2.0, True, 10.0), (9.0, True, 10.0), (12.5, True, 13.5), (28.9, True, 29.9), (29.0, True, None),
    (2.0, False, None),
])
def test_window_is_at_least_ten_seconds_and_long_utterances_take_whispers_own_path(audio_s, short, window):
    assert window_seconds(audio_s, short) == window


@pytest.mark.fast
def test_the_confidence_of_the_words_ending_a_transcript_is_that_of_their_tokens_and_the_end():
    heard = Transcription("Mate stop. Can penguins fly?", -0.9, tokens=(
        (" Mate", -3.0), (" stop", -0.5), (".", -1.0), (" Can", -0.3), (" peng", -0.2), ("uins", -0.1),
        (" fly", -0.2), ("?", -0.4), ("", -0.3)))
    assert heard.confidence_of("Can penguins fly?") == pytest.approx(-1.5 / 6)  # " Can" to the end of the text
    assert heard.confidence_of("penguins fly?") == pytest.approx(-1.2 / 5)  # a word's every token
    assert heard.confidence_of(heard.text) == pytest.approx(-6.0 / 9)
    assert Transcription("Stop. Can penguins fly?", -0.9).confidence_of("Can penguins fly?") == -0.9  # not known
    assert heard.confidence_of("") == -0.9


@pytest.mark.fast
@pytest.mark.parametrize(("said", "written"), [
    ("What is eight times eight?", "What is 8x8?"), ("Two hundred and one dogs.", "201 dogs"),
])
def test_a_number_written_in_words_or_digits_is_no_word_error(said, written):
    assert word_error_rate(said, written) == 0.0 and word_error_rate(said, "What is 9x8?") > 0


@pytest.mark.fast
def test_two_models_writing_one_number_two_ways_do_not_disagree_but_other_words_do():
    rule = MisheardRule(ask_again_below=-0.9, doubt_below=-0.6, disagree_above=0.5)
    unsure = Transcription("What is eight times eight?", -0.7)
    assert rule.worth_a_second_opinion(unsure) and not rule.unsure(unsure)
    assert not rule.disagree(unsure, Transcription("What is 8x8?", -0.3))
    assert rule.disagree(Transcription("Time was delayed.", -0.7), Transcription("What is 8x8?", -0.3))
    assert rule.unsure(Transcription("Mumble.", -1.2)) and not rule.worth_a_second_opinion(Transcription("", -2.0))


@pytest.mark.fast
@pytest.mark.parametrize(("decoded", "kept", "copies", "ran_out"), [
    ("What is half of ten? What is half of ten?", "What is half of ten?", 2, False),
    ("Eric Lowle once been a year. " * 9 + "Eric Low", "Eric Lowle once been a year.", 10, True),
    ("Eric Lowle once been a year. " * 2 + "Eric Lowle once been a ye", "Eric Lowle once been a year.", 3, True),
    ("Stop. Stop. Stop.", "Stop.", 1, False),  # kept once, but a person may well say it so
    ("Go on. Go on. Go", "Go on.", 1, False),  # a short one's cut-off copy: not a loop of ours
    ("Can you hear me? Can you hear me? Can you hear me", "Can you hear me?", 3, False),  # whole, its "?" dropped
    ("Hi. What is 2 plus 2? What is two plus two?", "Hi. What is 2 plus 2?", 2, False),  # the same words, two ways
    ("No. What is ten minus three? No.", "No. What is ten minus three? No.", 1, False),  # not running
    ("It is. It is not.", "It is. It is not.", 1, False),
    ("Tell me a story. Tell me a story about a dog.", "Tell me a story. Tell me a story about a dog.", 1, False),
    ("What is the capital of", "What is the capital of", 1, False),  # cut off, but no loop
    ("What is the capital of France? What is the", "What is the capital of France? What is the", 1, False),
    ("Это 2020. Там 2020.", "Это 2020. Там 2020.", 1, False),  # another script: its words are not compared
    ("Goodbye. Talk to you later. " * 9 + "Goodbye. Talk", "Goodbye. Talk to you later.", 10, True),  # two in turn
    ("Goodbye. Talk to you later. " * 4, "Goodbye. Talk to you later.", 4, False),
    ("Hello. How are you? Hello. How are you?", "Hello. How are you?", 2, False),
    ("Yes. No. Yes. No. Yes. No. Yes. No.", "Yes. No.", 1, False),  # too few words to be the decoder's loop
    ("Hi. Goodbye. Talk to you later. Goodbye. Talk to you later. Bye.", "Hi. Goodbye. Talk to you later. Bye.", 2,
     False),
    ("It is. It is not. It is.", "It is. It is not. It is.", 1, False),  # not a pair written again
    ("Goodbye. Talk to you later. Goodbye. Talk to you later. Goodbye.", "Goodbye. Talk to you later. Goodbye.", 2,
     False),  # its last copy ends a sentence: not cut off at the token limit
    ("", "", 1, False),
])
def test_a_sentence_written_again_and_again_is_kept_once(decoded, kept, copies, ran_out):
    assert without_repeats(decoded) == (kept, copies, ran_out)


@pytest.mark.fast
def test_a_decoder_that_loops_did_not_hear_the_words_but_a_question_said_again_is_heard():
    rule = MisheardRule(ask_again_below=-0.9)
    looped = Transcription.decoded("Eric Lowle once been a year. " * 9 + "Eric Low", -0.05)
    twice = Transcription.decoded("What is half of ten? What is half of ten?", -0.05)
    assert looped.text == "Eric Lowle once been a year." and looped.looped and rule.unsure(looped)
    assert twice.text == "What is half of ten?" and not twice.looped and not rule.unsure(twice)
    assert not MisheardRule(ask_again_below=None).unsure(looped)  # never asked again, as the config says
    thrice = Transcription.decoded("Can you hear me? " * 3, -0.05)  # a caller may well say it so
    assert thrice.text == "Can you hear me?" and not thrice.looped
    assert not Transcription.decoded("Can you hear me? Can you hear me? Can you hear me", -0.05).looped  # (no "?")
    assert Transcription.decoded("Can you hear me? " * 4, -0.05).looped
    stop = Transcription.decoded("Stop. Stop. Stop. Stop.", -0.05)
    assert stop.text == "Stop." and not stop.looped
    # one word or two running on to the token limit, in the echo of a speakerphone
    assert rule.unsure(Transcription.decoded("But, yeah, " + "no, " * 30, -0.12))
    assert Transcription.decoded("Thank you " * 15 + "Tha", -0.1).looped  # (cut off at the token limit)
    assert not Transcription.decoded("No, no, no, no, I said Paris!", -0.1).looped  # a person's
    assert not Transcription.decoded("Hello? " * 8, -0.1).looped  # a caller who hears nothing
    assert not Transcription.decoded("What song goes " + "na " * 12 + "hey hey goodbye?", -0.1).looped  # goes on
    assert not Transcription.decoded("Is it one, two, three, four, five, six, seven, eight?", -0.1).looped


@pytest.mark.fast
def test_words_whisper_is_a_little_unsure_of_are_misheard_when_the_model_finds_them_unlikely_too():
    rule = MisheardRule(ask_again_below=-0.9, reading_below=-0.3, reading_weight=0.1)
    nonsense, question = Transcription("Is my murder flying insect?", -0.35), Transcription("Is the sun a star?", -0.35)
    assert rule.worth_a_reading(nonsense) and rule.worth_a_reading(question)
    assert rule.implausible(nonsense, -6.0) and not rule.implausible(question, -2.0)
    assert not rule.worth_a_reading(Transcription("Is the sun a star?", -0.1))  # sure: not read
    assert not rule.worth_a_reading(Transcription("Mumble.", -1.2))  # asked again by Whisper's confidence alone
    assert not MisheardRule(reading_below=None).worth_a_reading(nonsense)
    assert not MisheardRule(ask_again_below=None).worth_a_reading(nonsense)  # never asked again: never read
    assert rule.reads and not MisheardRule(reading_below=None).reads and not MisheardRule(ask_again_below=None).reads


@pytest.mark.fast
def test_the_rule_is_the_configs():
    from vita.config import Config

    asr = Config().asr
    asr.reading_weight, asr.sense_check_below = 0.2, -0.5
    rule = MisheardRule.from_config(asr)
    assert (rule.reading_weight, rule.sense_check_below, rule.ask_again_below) == (0.2, -0.5, asr.ask_again_below)


@pytest.fixture(scope="module")
def whisper():
    return WhisperTranscriber(Config().models_path() / "whisper-base", "int8", 2, "en", 1)


def test_short_window_hears_the_words_and_nothing_in_silence_or_noise(whisper):
    question = np.concatenate([silence(0.2), spoken("How many legs does a spider have?"), silence(0.3)])
    assert whisper.transcribe(question.tobytes()) == "How many legs does a spider have?"
    assert whisper.transcribe(silence(1.0).tobytes()) == ""
    assert whisper.transcribe(noise(1.0).tobytes()) == ""


def test_whisper_is_sure_of_clear_speech_and_less_so_of_the_same_words_in_noise(whisper):
    question = np.concatenate([silence(0.2), spoken("Which animal has a long trunk?"), silence(0.3)])
    clear = whisper.hear(question.tobytes())
    assert "trunk" in clear.text.lower() and clear.avg_logprob > Config().asr.ask_again_below
    rng = np.random.default_rng(0)
    level = np.sqrt(np.mean(question.astype(np.float32) ** 2))
    buried = (question + rng.normal(0, 1.5 * level, question.size)).clip(-32768, 32767).astype(np.int16)
    noisy = whisper.hear(buried.tobytes())
    assert noisy.text == "" or noisy.avg_logprob < clear.avg_logprob, (clear, noisy)


def test_an_unsure_greedy_transcript_is_decoded_again_with_beam_search(whisper):
    """Under redecode_below the same encoder output is decoded again with a beam, and its own score goes on to the
    "say it again" rules; a sure transcript is not (the beam costs ~0.14 s), nor is a quick check (redecode=False)."""
    question = np.concatenate([silence(0.2), spoken("Which animal has a long trunk?"), silence(0.3)]).tobytes()
    greedy = whisper.hear(question)
    redecoding = WhisperTranscriber(Config().models_path() / "whisper-base", "int8", 2, "en", 1, redecode_below=0.0)
    redecoding.warm_up()
    again = redecoding.hear(question)
    assert again.beam and "trunk" in again.text.lower() and again.avg_logprob < 0.0, again
    assert redecoding.hear(question, redecode=False) == greedy  # the greedy words and score, untouched
    redecoding.redecode_below = greedy.avg_logprob - 0.01  # sure enough
    assert redecoding.hear(question) == greedy


def test_each_tokens_confidence_is_told_when_asked_greedy_and_after_a_beam(whisper):
    """token_scores: each token's log-probability (their mean is Whisper's own score for the greedy pass) and that
    of the request ending the words, alone; a beam's are read again by the decoder."""
    question = np.concatenate([silence(0.2), spoken("Stop. Which animal has a long trunk?"), silence(0.3)]).tobytes()
    plain = whisper.hear(question)
    scored = whisper.hear(question, token_scores=True)
    assert plain.tokens == () and scored.text == plain.text and len(scored.tokens) >= 8
    assert "".join(piece for piece, _ in scored.tokens).strip() == scored.text and scored.tokens[-1][0] == ""
    mean = sum(lp for _, lp in scored.tokens) / len(scored.tokens)
    assert mean == pytest.approx(scored.avg_logprob, abs=0.05) and all(lp <= 0 for _, lp in scored.tokens)
    request = after_stop_command(scored.text, ("stop",))  # "which animal has a long trunk?"
    assert request != scored.text and scored.confidence_of(request) > scored.avg_logprob  # "Stop," less sure
    redecoding = WhisperTranscriber(Config().models_path() / "whisper-base", "int8", 2, "en", 1, redecode_below=0.0)
    again = redecoding.hear(question, token_scores=True)
    assert again.beam and "".join(piece for piece, _ in again.tokens).strip() == again.text
    assert all(lp <= 0 for _, lp in again.tokens) and again.confidence_of(request) > -1.5
    # the greedy pass's words read again score as the pass scored them
    audio = np.frombuffer(question, np.int16).astype(np.float32) / 32768.0
    window = window_seconds(audio.size / 16000, True)
    read = whisper._with_token_scores(Transcription(scored.text), whisper._encode(audio, window)[0], window)
    drift = [abs(a - b) for (_, a), (_, b) in zip(read.tokens, scored.tokens[:-1], strict=True)]
    assert sum(drift) / len(drift) < 0.1, (read.tokens, scored.tokens)


def test_utterances_that_end_together_are_heard_side_by_side_each_with_its_own_words():
    """asr.workers: the LLM worker hears that many utterances at once from as many threads (turns that end
    together), each on a model replica of its own; what one thread hears never leaks into another's words."""
    side_by_side = WhisperTranscriber(Config().models_path() / "whisper-base", "int8", 1, "en", 1,
                                      workers=Config().asr.workers)
    assert side_by_side.model.model.num_workers == Config().asr.workers == 2
    said = ["How many legs does a spider have?", "What is the capital of France?"] * 2
    clips = [np.concatenate([silence(0.2), spoken(text), silence(0.3)]).tobytes() for text in said]
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(side_by_side.transcribe, clips)) == said


@pytest.mark.fast
@pytest.mark.parametrize(("one_s", "two_s", "threads"), [
    (0.20, 0.20, 1), (0.21, 0.20, 1), (0.20, 0.18, 1), (0.40, 0.22, 2), (0.30, 0.25, 2)])
def test_an_utterance_gets_a_second_thread_only_where_it_hears_it_clearly_faster(one_s, two_s, threads):
    """asr.cpu_threads auto: a second thread that barely helps one utterance is worth more hearing another."""
    assert threads_from(one_s, two_s) == threads


def test_the_threads_an_utterance_gets_are_measured_on_this_cpu():
    model = Config().models_path() / "whisper-base"
    whisper, threads, why = threads_worth_it(lambda n: WhisperTranscriber(model, "int8", n, "en", 1))
    assert threads in (1, 2) and "one thread" in why and "two" in why
    assert whisper.transcribe(bytes(2 * 2 * 16000)) == ""  # the measured model, kept to be used
    timed = [float(t) for t in re.findall(r"(\d+\.\d+) s", why)]
    assert len(timed) == 2 and all(0 < t < 5 for t in timed) and threads == threads_from(*timed)
