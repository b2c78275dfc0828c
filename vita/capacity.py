"""How many sessions a machine serves at the promised latency (`--max_users auto`), from the speed the LLM worker
measures as it starts. Shared by the front (its seats) and the worker (how many sessions it warms up for)."""

from __future__ import annotations

from vita.messages import MeasuredSpeed

# --max_users auto: seats while the LLM worker has not measured this machine yet, and how they are sized after.
SEATS_BEFORE_MEASURED = 2
VOICE_TO_VOICE_BUDGET_S = 2.0  # the slowest of the users who ask at the same moment hears the answer by then
FIRST_PIECE_TOKENS = 6  # decoded before the first words can be spoken
MOST_AUTO_SEATS = 8
# Typed text: what one session may make the engine prefill. A typed message is a prompt: at a share of the engine's
# measured prefill speed, one session's typing cannot crowd out the others' turns whatever the machine.
TEXT_SHARE = 0.1  # of the engine's prefill, for one session's typed text (and a Realtime client's new instructions)
CHARS_PER_TOKEN = 4.0
MOST_TEXT_CHARS_S = 100.0  # where the engine is fast: a person types ~5 a second, a paste comes now and then
LEAST_TEXT_CHARS_S = 20.0
DECODE_SHARE_LOST = 0.5  # what another stream in the batch adds to a reply's decoding, as a share of it alone


def seats_for(speed: MeasuredSpeed) -> tuple[int, str]:
    """How many sessions this machine serves within the budget, and why (for the log and /health).

    One turn's first words take ASR + the first token + a few decoded tokens. Turns that end together share the
    cores for their ASR and wait for each other's prefill, and share the engine's decoding (batched, each stream
    slower): each user more adds ASR + first token + about half the first words' decoding (on a 2-core Zen 1
    EPYC a second user added 2.0 s at p50; this says 1.9). So many users fit the budget; one always does."""
    first_words = FIRST_PIECE_TOKENS / max(speed.decode_tok_s, 0.1)
    alone = speed.asr_s + speed.first_token_s + first_words
    each_more = max(speed.asr_s + speed.first_token_s + DECODE_SHARE_LOST * first_words, 0.01)
    seats = 1 if alone >= VOICE_TO_VOICE_BUDGET_S else 1 + int((VOICE_TO_VOICE_BUDGET_S - alone) / each_more)
    seats = min(seats, MOST_AUTO_SEATS)
    return seats, (f"{seats} (measured here: ASR {speed.asr_s:.2f} s, first token {speed.first_token_s:.2f} s, "
                   f"decoding {speed.decode_tok_s:.1f} tokens/s: one turn's first words ~{alone:.2f} s, "
                   f"~{each_more:.2f} s more for each user asking at the same moment; budget "
                   f"{VOICE_TO_VOICE_BUDGET_S:g} s)")


def text_chars_per_s(speed: MeasuredSpeed) -> float:
    """The typed characters a second one session may bring (after its burst): TEXT_SHARE of the engine's prefill."""
    if speed.prefill_tok_s <= 0:
        return MOST_TEXT_CHARS_S
    return max(LEAST_TEXT_CHARS_S, min(MOST_TEXT_CHARS_S, TEXT_SHARE * speed.prefill_tok_s * CHARS_PER_TOKEN))
