"""Benchmark the server's echo canceller (vita/hearing/echo_canceller.py) on a simulated speakerphone
(tests/harness/speakerphone.py: the reply heard back 50-350 ms later, 10 dB down, through a synthetic room).

echo: how far the echo is cut once the canceller has converged (after the reply's first 1.5 s), how much of the
user's level survives when they speak over it (double talk), and the CPU it costs (share of one core), for each
delay, with WebRTC's noise suppressor off and on; and the user's words when no echo comes back at all (a client
that cancels its own: the canceller must not eat them).
gate: a session's real ears (Silero, the voice gate with its EchoReference, the canceller) on such a call: does
the reply's echo alone start speech (it must not), and is the user who speaks over it confirmed (barge-in)?
With the canceller and without it (the echo guard alone).
talk: does Whisper hear a user who talks over the reply's echo? "Wait, stop. <question>" (the room benchmark's
interruptions, hibari and the Piper voice in turn) 1.2 s into a long reply, 10 dB over its echo, the reply stopped
0.75 s into the words (as a session stops it); the echo's delay (50-250 ms) held since the reply before it, or moved
(100 ms later, or 150 ms sooner).
The command is the part spoken over the echo: is it heard as one (the request is then what is answered; a misheard
one, "Wheat stop is water wet.", is asked again)? Word error rate of the request as the server separates it (after
the command), and of the request's words alone (the transcript's last as many words), garbled ones (the latter over
0.3), Whisper's confidence in the request (asked again under the config's ask_again_below), for the user alone, the
microphone, and the canceller's output (the moved delay also as AEC3 alone follows it: not realigned).
moves: the same reply twice, the echo's delay moved between them (every pair of 50-250 ms): how far the second
reply's echo is cut, half a second at a time after it arrives, with the canceller realigning to the delay it was
fitted to and without (AEC3 left to find the moved delay by itself).
noise: does WebRTC's noise suppressor help Whisper? Spoken questions (hibari) under white noise, a fan's hum and
other people talking, at 10, 5 and 0 dB SNR: word error rate and garbled transcripts (WER > 0.5) as heard raw,
through the canceller with the suppressor off (with nothing played it passes the microphone's audio on: a second
raw run, which shows how much Whisper's own results vary), and with it on.

Usage: .venv/bin/python -m scripts.bench.stages.echo_cancel [echo|gate|talk|moves|noise] [--questions N]
       [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from scripts.eval.voices import synthesize
from tests.harness.speakerphone import Call, Speakerphone, level_db
from tests.harness.speech import babble, noise, spoken, under
from vita.hearing.echo_canceller import FRAME, RATE, EchoCanceller

REPLY = ("The capital of France is Paris. It is a lovely city in spring, with wide avenues and old cafes.",
         "Would you like to hear more about its museums and its history?")
USER = "No, wait. Tell me about Berlin instead."
DELAYS = (0.05, 0.1, 0.15, 0.25, 0.35)
USER_AT_S = 4.0  # the user speaks over the reply from here
USER_UNDER_REPLY_DB = 6.0  # ...this far under the reply's level at the speaker (the echo comes back 10 dB down)


def reply_audio() -> np.ndarray:
    return np.concatenate([np.asarray(spoken(line)) for line in REPLY])


def user_on(seconds: float, user: np.ndarray, reply: np.ndarray) -> np.ndarray:
    """The user's words at USER_AT_S on the call's timeline, USER_UNDER_REPLY_DB under the reply."""
    near = np.zeros(int(seconds * RATE))
    voice = under(user.astype(np.float32), reply, USER_UNDER_REPLY_DB).astype(np.float64)
    start = int(USER_AT_S * RATE)
    near[start:start + voice.size] = voice[:max(0, near.size - start)]
    return near.astype(np.int16)


def timed(call, spent: list[float]):
    """`call`, its CPU time added to spent[0] (the canceller's own cost, not the simulation's)."""
    def timed_call(*args):
        started = time.process_time()
        try:
            return call(*args)
        finally:
            spent[0] += time.process_time() - started
    return timed_call


def echo(args) -> list[dict]:
    reply, user = reply_audio(), synthesize("hibari", USER)
    seconds = 0.5 + reply.size / RATE + 0.3
    near = user_on(seconds, user, reply)
    span = slice(int(USER_AT_S * RATE), int(USER_AT_S * RATE) + user.size)
    rows = []
    for delay, echo_db in [(d, -10.0) for d in DELAYS] + [(0.15, -200.0)]:  # (-200: a client that cancels its own)
        for ns in (False, True):
            call = Call(reply, np.zeros(0, np.int16), seconds, Speakerphone(delay_s=delay, echo_db=echo_db))
            canceller = EchoCanceller(noise_suppression=ns)
            spent = [0.0]
            out = call.run(timed(canceller.played, spent), timed(canceller.clean, spent))
            _, mic = call.timeline()
            settled = slice(int(2.0 * RATE), out.size)
            talk = Call(reply, near, seconds, Speakerphone(delay_s=delay, echo_db=echo_db))
            canceller = EchoCanceller(noise_suppression=ns)
            both = talk.run(canceller.played, canceller.clean)
            _, heard = talk.timeline()
            row = {"delay_s": delay, "echo_db": echo_db, "noise_suppression": ns,
                   "echo_cut_db": round(level_db(mic[settled]) - level_db(out[settled]), 1),
                   "user_kept_db": round(level_db(both[span]) - level_db(near[span]), 1),
                   "mic_over_user_db": round(level_db(heard[span]) - level_db(near[span]), 1),
                   "cpu_share": round(spent[0] / seconds, 4),
                   "echo_heard": canceller.detector.heard, "detector_peak": round(canceller.detector.peak, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def gate(args) -> list[dict]:
    from vita.config import Config
    from vita.hearing.silero import SileroModel
    from vita.hearing.vad import VadSegmenter
    from vita.hearing.voice_gate import EchoReference
    from vita.turns.listener import SpeechListener

    config = Config()
    model = SileroModel(config.vad_model_path())
    reply, user = reply_audio(), synthesize("hibari", USER)
    seconds = 0.5 + reply.size / RATE + 1.0
    rows = []
    for delay in DELAYS:
        for cancel in (False, True):
            for talking in (False, True):
                reference = EchoReference()
                segmenter = VadSegmenter.from_config(config.vad, model, config.turn, echo=reference)
                listener = SpeechListener(segmenter, EchoCanceller() if cancel else None)
                near = user_on(seconds, user, reply) if talking else np.zeros(0, np.int16)
                call = Call(reply, near, seconds, Speakerphone(delay_s=delay))
                heard: list[tuple[float, str]] = []

                def played(pcm: bytes, rate: int, at: float, listener=listener, reference=reference) -> None:
                    listener.segmenter.guarded = True  # the reply plays: the session is speaking
                    reference.play(pcm, rate, at)
                    if listener.canceller is not None:
                        listener.canceller.played(pcm, rate, at)

                def hear(pcm: np.ndarray, arrived: float, listener=listener, heard=heard, call=call) -> np.ndarray:
                    for event in listener.hear(pcm, RATE, arrived, arrived):  # (as the session's thread does)
                        heard.append((round(arrived - call.t0, 2), type(event).__name__))
                    return pcm

                call.run(played, hear)
                kinds = [k for _, k in heard]
                confirmed = [t for t, k in heard if k == "SpeechConfirmed"]
                row = {"delay_s": delay, "canceller": cancel, "user_talks": talking,
                       "starts": kinds.count("SpeechStarted"),
                       "starts_before_user": sum(1 for t, k in heard if k == "SpeechStarted" and t < USER_AT_S),
                       "confirmed_after_user_s": round(confirmed[0] - USER_AT_S, 2) if confirmed and talking
                       else None, "events": heard}
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "events"}), flush=True)
    return rows


TALK_DELAYS = (0.05, 0.1, 0.15, 0.2, 0.25)
TALK_AT_S = 1.2  # into the reply the user speaks (the room benchmark's interruptions)...
TALK_STOPPED_S = 0.75  # ...and the session stops the reply this far into their words


def talk(args) -> list[dict]:
    from scripts.eval.questions import LONG, plain_questions
    from tests.harness.speech import speech_level_db
    from vita.config import Config
    from vita.words import after_stop_command, said_words, stop_phrases
    from workers.llm.engines.asr import WhisperTranscriber, word_error_rate

    config = Config()
    cfg = config.asr
    asr = WhisperTranscriber(config.models_path() / cfg.model, cfg.compute_type, 2, "en", cfg.beam_size,
                             redecode_below=cfg.redecode_below, redecode_beam_size=cfg.redecode_beam_size)
    phrases = stop_phrases(config.turn.stop_words)
    rows = []
    for k, question in enumerate(q["q"] for q in plain_questions()[12:12 + args.questions]):
        before = spoken(" ".join(LONG[(k + j) % len(LONG)] for j in (0, 3)))
        reply = spoken(" ".join(LONG[(k + j) % len(LONG)] for j in (1, 2)))
        words = synthesize(("hibari", "piper")[k % 2], f"Wait, stop. {question}").astype(np.float64)
        words *= 10 ** ((speech_level_db(reply) - speech_level_db(words.astype(np.int16))) / 20)  # 10 dB over the echo
        second_at = 0.5 + before.size / RATE + 1.0  # (the call's first reply starts 0.5 s in; a second between)
        onset = second_at + TALK_AT_S
        seconds = onset + words.size / RATE + 1.0
        near = np.zeros(int(seconds * RATE))
        near[int(onset * RATE):int(onset * RATE) + words.size] = words
        played = np.concatenate([before, np.zeros(RATE, np.int16), reply])[:int((onset + TALK_STOPPED_S - 0.5) * RATE)]
        said = slice(int((onset - 0.3) * RATE), int((onset + 0.4) * RATE) + words.size)
        delay = TALK_DELAYS[(k + 2) % len(TALK_DELAYS)]
        moved = TALK_DELAYS[k % len(TALK_DELAYS)]
        for path, before_s in [("user alone", delay), ("microphone", delay), ("cancelled, delay held", delay),
                               ("cancelled, delay moved", moved), ("cancelled, delay moved, not realigned", moved)]:
            call = Call(played, near.astype(np.int16), seconds,
                        Speakerphone(delay_s=before_s, echo_db=-10.0, moved=(second_at, delay)))
            _, mic = call.timeline()
            if path == "user alone":
                audio = near.astype(np.int16)[said]
            elif path == "microphone":
                audio = mic[said]
            else:
                canceller = EchoCanceller(realign=not path.endswith("not realigned"))
                audio = call.run(canceller.played, canceller.clean)[said]
            heard = asr.hear(audio.tobytes(), RATE, True, True)
            request = after_stop_command(heard.text, phrases)
            sure = heard.confidence_of(request) if heard.tokens and request != heard.text.strip() else heard.avg_logprob
            ending = " ".join(said_words(heard.text)[-len(said_words(question)):])  # (a misheard command aside)
            rows.append({"k": k, "path": path, "delay_s": delay, "moved_from_s": before_s, "said": question,
                         "heard": heard.text, "command": request != heard.text.strip(),
                         "request_wer": round(word_error_rate(question, request), 3),
                         "wer": round(word_error_rate(question, ending), 3), "logprob": round(sure, 3)})
            print(json.dumps(rows[-1]), flush=True)
    for path in dict.fromkeys(r["path"] for r in rows):
        mine = [r for r in rows if r["path"] == path]
        wer = round(float(np.mean([r["wer"] for r in mine])), 3)
        request_wer = round(float(np.mean([r["request_wer"] for r in mine])), 3)
        print(json.dumps({"path": path, "requests": len(mine), "commands_heard": sum(r["command"] for r in mine),
                          "request_wer": request_wer, "wer": wer,
                          "garbled": sum(r["wer"] > 0.3 for r in mine),
                          "asked_again": sum(cfg.ask_again_below is not None and r["logprob"] < cfg.ask_again_below
                                             for r in mine),
                          "logprob_p50": round(float(np.median([r["logprob"] for r in mine])), 3)}), flush=True)
    return rows


def moves(args) -> list[dict]:
    from tests.harness.speakerphone import replied_twice

    reply = reply_audio()
    rows = []
    for realign in (True, False):
        cuts = []
        for before_s in TALK_DELAYS:
            for after_s in (d for d in TALK_DELAYS if d != before_s):
                call, second_at = replied_twice(reply, before_s, after_s, 3.5)
                canceller = EchoCanceller(realign=realign)
                out = call.run(canceller.played, canceller.clean)
                _, mic = call.timeline()
                half = RATE // 2
                starts = range(int((second_at + after_s) * RATE), int((second_at + 3.5) * RATE) - half, half)
                cuts.append([level_db(mic[s:s + half]) - level_db(out[s:s + half]) for s in starts])
                print(json.dumps({"realign": realign, "from_s": before_s, "to_s": after_s,
                                  "cut_db": [round(c, 1) for c in cuts[-1]]}), flush=True)
        table = np.array(cuts)
        rows.append({"realign": realign, "moves": len(cuts), "cut_db_mean": np.round(table.mean(0), 1).tolist(),
                     "half_seconds_under_10_db": int((table < 10).sum()), "half_seconds": int(table.size)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def hum(seconds: float, seed: int = 0) -> np.ndarray:
    """A fan: brown noise plus a 120 Hz hum and its harmonics."""
    n = int(seconds * RATE)
    rng = np.random.default_rng(seed)
    brown = np.cumsum(rng.normal(0, 1, n))
    brown -= np.convolve(brown, np.ones(400) / 400, mode="same")  # (no drift)
    t = np.arange(n) / RATE
    tone = sum(np.sin(2 * np.pi * 120 * k * t) / k for k in (1, 2, 3))
    return (brown / (np.std(brown) + 1e-9) + 0.5 * tone).astype(np.float32)


def processed(audio: np.ndarray, ns: bool) -> np.ndarray:
    """`audio` through the canceller (nothing played: the microphone's own audio, or the suppressor's if `ns`)."""
    canceller = EchoCanceller(noise_suppression=ns)
    lead = np.zeros(FRAME * 50, np.int16)  # (the suppressor learns the noise in its first frames: give it them)
    out = canceller.clean(np.concatenate([lead, audio, np.zeros(FRAME, np.int16)]), 1000.0)
    return out[lead.size:lead.size + audio.size]


def noisy(args) -> list[dict]:
    from scripts.eval.questions import QUESTIONS as QUESTIONS_FILE
    from vita.config import Config
    from workers.llm.engines.asr import WhisperTranscriber, word_error_rate

    questions = [q["q"] for q in json.loads(QUESTIONS_FILE.read_text())["questions"]
                 if "camera" not in q and q.get("set") == "report"][:args.questions]
    cfg = Config().asr
    asr = WhisperTranscriber(Config().models_path() / cfg.model, "int8", 2, "en", cfg.beam_size,
                             redecode_below=cfg.redecode_below, redecode_beam_size=cfg.redecode_beam_size)
    beds = {"white": lambda s, k: noise(s, level=1.0, seed=k).astype(np.float32),
            "fan": lambda s, k: hum(s, seed=k), "babble": lambda s, k: babble(s)}
    rows = []
    for bed_name, make in beds.items():
        for snr in (10, 5, 0):
            for path in ("raw", "off", "ns"):
                wers = []
                for k, q in enumerate(questions):
                    speech = synthesize("hibari", q)
                    padded = np.concatenate([np.zeros(RATE // 2, np.int16), speech, np.zeros(RATE // 4, np.int16)])
                    bed = make(padded.size / RATE, k)
                    mixed = np.clip(padded.astype(np.int32) + under(bed, speech, snr), -32768, 32767)
                    mixed = mixed.astype(np.int16)
                    audio = mixed if path == "raw" else processed(mixed, path == "ns")
                    wers.append(word_error_rate(q, asr.transcribe(audio.tobytes())))
                row = {"bed": bed_name, "snr_db": snr, "path": path, "wer": round(float(np.mean(wers)), 3),
                       "garbled": sum(w > 0.5 for w in wers), "questions": len(questions)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("echo", "gate", "talk", "moves", "noise"), nargs="?", default="echo")
    parser.add_argument("--questions", type=int, default=20, help="talk, noise: how many questions")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    rows = {"echo": echo, "gate": gate, "talk": talk, "moves": moves, "noise": noisy}[args.what](args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
