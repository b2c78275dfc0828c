"""What a transcript's words say about a turn: the speaker is going on, the sentence has ended, or a few words
ask the assistant to stop. Shared by the front's turn machine and the LLM worker (which hears "Stop." itself). And
the phrases the assistant says of itself, which the LLM worker sends and the TTS worker has ready."""

from __future__ import annotations

import difflib
import re

# What the assistant says of itself, word for word, in any session: the TTS worker has them spoken in every voice
# before it is ready (workers/tts/phrase_cache.StockPhrases), so they play at once.
ASK_AGAIN = "Sorry, I didn't catch that. Could you say it again?"  # the reply when ASR misheard
FILLER = "Let me check."  # while a slow tool runs
APOLOGY = "Sorry, I couldn't get that answer."  # when nothing came of the tools
STOCK_PHRASES = (ASK_AGAIN, FILLER, APOLOGY)

MAX_COMMAND_WORDS = 4  # "Stop.", "No, wait.", "Hold on please": longer speech is judged by its duration alone
REQUEST_MIN_WORDS = 2  # a request run on after a command, unpunctuated, has this many words at least (and opens
# as REQUEST_OPENERS, below)


def words_of(text: str) -> list[str]:
    return "".join(c if c.isalnum() or c == "'" else " " for c in text.lower()).split()


# Numbers as Whisper writes them (digits), however a model, a voice or a person wrote them.
_UNITS = {w: i for i, w in enumerate([
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"])}
_TENS = {w: 10 * i for i, w in enumerate(
    ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"], 2)}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1000000}
_SYMBOLS = {"+": " plus ", "%": " percent ", "&": " and ", "=": " equals "}


def _numbers_as_digits(tokens: list[str]) -> list[str]:
    """"twenty five" → "25", "two hundred and one" → "201": how Whisper writes numbers, whichever way a model
    or a person wrote them."""
    out: list[str] = []
    total = current = 0
    in_number = False

    def close() -> None:
        nonlocal total, current, in_number, last_scale
        if in_number:
            out.append(str(total + current))
        total = current = last_scale = 0
        in_number = False

    last_scale = 0
    for i, token in enumerate(tokens):
        if token == "zero":  # a digit of its own ("zero five", "double-o seven" read out)
            close()
            out.append("0")
        elif token in _UNITS or token in _TENS:
            value = _UNITS.get(token, _TENS.get(token, 0))
            tens = current % 100
            # Only a unit after a round ten joins it ("twenty five"); "ten five", "five six" are two numbers.
            if in_number and tens and not (value < 10 and tens >= 20 and tens % 10 == 0):
                close()
            current += value
            in_number = True
        elif token in _SCALES and in_number and (not last_scale or _SCALES[token] < last_scale or not total):
            scale = _SCALES[token]
            if scale == 100:
                if current >= 100:  # "one hundred two hundred": a second number
                    close()
                    out.append(token)
                    continue
                current *= 100
            else:
                total, current = total + current * scale, 0
            last_scale = scale
        elif token == "|":  # punctuation: "twenty, one" is two numbers
            close()
        elif token == "and" and in_number and (total or current >= 100) and i + 1 < len(tokens) and (
                tokens[i + 1] in _UNITS or tokens[i + 1] in _TENS):
            continue  # "two hundred and one"
        else:
            close()
            out.append(token)
    close()
    return out


def said_words(text: str) -> list[str]:
    """The words of a transcript, compared as said: lower case, no punctuation, numbers in digits ("eight times
    eight" and "8x8" are the same three words; two models writing one number two ways do not disagree; a reply's
    "twenty" comes back "20"). English number words only; other scripts' words are kept as they are."""
    text = text.lower().replace("\u2019", "'")
    for symbol, word in _SYMBOLS.items():
        text = text.replace(symbol, word)
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)  # 1,000
    text = re.sub(r"(?<=\d)\s*x\s*(?=\d)", " times ", text)  # 8x8
    text = re.sub(r"(?<=\d)(?=[a-z])|(?<=[a-z])(?=\d)", " ", text)
    text = re.sub(r"[,;:!?]|(?<!\d)\.|\.(?!\d)", " | ", text)  # (ends a number; not a word)
    tokens = _numbers_as_digits(re.sub(r"[^\w.'| ]|_", " ", text).split())  # (any script's letters)
    return [t for t in tokens if t != "|"]


# Words after which a speaker goes on: a request never ends on them (with no full stop or question mark after the
# function words: "What is it for?" is finished).
GOING_ON_WORDS = frozenset(["and", "but", "or", "so", "because", "um", "uh", "er"])
OPEN_ENDED_WORDS = frozenset([
    "the", "a", "an", "to", "of", "with", "for", "about", "my", "your", "our", "their", "his", "her", "its", "in",
    "on", "at", "from", "by", "into", "is", "are", "was", "were", "if", "that", "than", "as", "like", "whether"])
QUESTION_WORDS = frozenset(["what", "how", "when", "where", "why", "which", "who"])
MODAL_WORDS = frozenset(["should", "can", "could", "would", "will", "do", "does", "did", "must", "may", "might"])
SUBJECT_WORDS = frozenset(["i", "you", "we", "they", "he", "she", "it"])
SENTENCE_ENDS = (".", "?", "!")
# A whole utterance that only announces the request ("I have a question.", "Quick question:").
PREAMBLES = frozenset({
    "i have a question", "i have another question", "i have one more question", "i've got a question",
    "i got a question", "i have a quick question", "quick question", "one more question", "another question",
    "question", "let me ask you something", "let me ask you a question", "i want to ask you something",
    "i'd like to ask you something", "i was wondering", "okay so", "ok so", "so", "well", "um", "uh", "listen",
})


def sounds_unfinished(text: str) -> bool:
    """The words say the speaker is going on: they end on "and" or a comma, or only announce a request, or ask
    a question that stops at its verb ("How long should I?": Whisper adds the question mark)."""
    text = text.strip()
    words = words_of(text)
    if not words:
        return False
    if text.endswith((",", "...", "…", "-", "—", ":")):
        return True
    if words[-1] in GOING_ON_WORDS and not (words[-1] == "so" and text.endswith(SENTENCE_ENDS)):
        return True  # "...and", "...because" (but "I think so." is finished)
    if words[-1] in OPEN_ENDED_WORDS and not text.endswith(SENTENCE_ENDS):
        return True
    if (len(words) >= 4 and words[0] in QUESTION_WORDS and words[-2] in MODAL_WORDS
            and words[-1] in SUBJECT_WORDS):
        return True
    return " ".join(words) in PREAMBLES


def ends_sentence(text: str) -> bool:
    """The words end a sentence ("...have?", "...please.") and do not say the speaker goes on."""
    return text.strip().endswith(SENTENCE_ENDS) and not sounds_unfinished(text)


def stop_phrases(setting: str) -> tuple[str, ...]:
    """The config's comma-separated turn.stop_words as phrases."""
    return tuple(p.strip() for p in setting.split(",") if p.strip())


def is_stop_command(text: str, phrases: tuple[str, ...]) -> bool:
    """A few words that ask the assistant to stop ("Stop.", "Wait, wait.", "No.", "Wait, stop. Do cats..." heard
    at a pause over the reply), not a backchannel ("Mm-hmm.", "Yeah.", "Okay.") nor a sentence that happens to hold
    one of the words."""
    words = words_of(text)
    if not words or len(words) > MAX_COMMAND_WORDS:
        return False
    joined_words = f" {' '.join(words)} "
    return any(phrase in joined_words for phrase in _spaced(phrases))


def _spaced(phrases: tuple[str, ...]) -> list[str]:
    """Each phrase as its words between spaces, to be found whole in a text's words joined the same way."""
    return [f" {' '.join(words_of(p))} " for p in phrases if words_of(p)]


# What a request that is only a stop command may hold besides its stop phrase ("Oh, stop it please.", "Wait a
# second.", "That's enough."): any other word makes it a request to answer ("Stop, do cats bark?" went unanswered),
# but "and" between two phrases ("Wait and stop.", Whisper's "Wait, stop." over the echo; "Wait, and you?" is asked).
COMMAND_FILLER = frozenset([
    "please", "now", "it", "that", "that's", "this", "oh", "no", "ok", "okay", "just", "a", "one", "second", "sec",
    "moment", "minute", "there", "right", "talking", "thanks", "thank", "you", "hey", "um", "uh", "so", "well",
    "be", "is", "up", "sorry", "alright", "yeah", "all", "enough", "stop", "wait"])


# How a request run on after a stop command opens: anything else may be the command's own ("Please stop talking
# about the weather", "Never mind the weather", "Please wait for me")
REQUEST_OPENERS = QUESTION_WORDS | MODAL_WORDS | frozenset([
    "is", "are", "was", "were", "am", "tell", "give", "explain", "describe", "what's", "how's", "where's", "who's",
    "when's", "why's", "let's"])

# A first word that turns a command round is never taken for a misheard one ("Don't stop.", "Why wait?")
KEPT_FIRST_WORDS = QUESTION_WORDS | MODAL_WORDS | frozenset(["don't", "dont", "not", "never", "can't", "cannot",
                                                             "won't", "didn't", "is", "are", "no"])


def only_asks_to_stop(text: str, phrases: tuple[str, ...], first_word_misheard: bool = False) -> bool:
    """A stop command and nothing more to answer: its stop phrase and a few fillers at most.
    first_word_misheard: its first word may be another that Whisper heard wrong over a reply's echo ("We stop.",
    "Reef stop.", "Awesome! Wait!" for "Wait, stop."): the rest alone may be the command."""
    first, _, rest = text.strip().replace("\u2019", "'").partition(" ")  # (a typographic apostrophe too)
    if first_word_misheard and rest and words_of(first) and words_of(first)[0] not in KEPT_FIRST_WORDS and \
            only_asks_to_stop(rest, phrases):
        return True
    if not is_stop_command(text, phrases):
        return False
    joined = " " + " ".join(words_of(text.replace("\u2019", "'"))) + " "  # (a typographic apostrophe too)
    said = _spaced(phrases)
    found = 0
    while any(phrase in joined for phrase in said):  # ("hold on, hold on": the second after the first is gone)
        for phrase in said:
            found += joined.count(phrase)
            joined = joined.replace(phrase, " ")
    return set(joined.split()) - ({"and"} if found > 1 else set()) <= COMMAND_FILLER


_CLAUSE_END = re.compile(r"(?:[.!?,;:\u2026]+|\s[-\u2013\u2014])\s+")  # (an ellipsis or a dash too)


def after_stop_command(text: str, phrases: tuple[str, ...]) -> str:
    """The request that follows a stop command opening the speech ("Wait, stop. What animal says moo?" -> "What
    animal says moo?"), or the text as it is when it opens with none or is nothing more. The model reads how likely
    the words are: over a speakerphone's echo the command is often misheard ("We stop."), and how surprising it is
    says nothing of the question after it."""
    text = text.strip()
    rest = text
    if only_asks_to_stop(text, phrases):
        return text
    for end in _CLAUSE_END.finditer(text):
        opening, after = text[:end.end()], text[end.end():]
        if len(words_of(opening)) > MAX_COMMAND_WORDS or not words_of(after):
            break
        if only_asks_to_stop(opening, phrases, first_word_misheard=True):
            rest = after
    return rest if rest != text else _after_run_on_command(text, phrases)


def _after_run_on_command(text: str, phrases: tuple[str, ...]) -> str:
    """Whisper may run the command into the request, unpunctuated ("Wait stop do cats bark", "Wheat stop is water
    wet."): an opening of two words or more that is only the command and ends with its stop phrase, before two words
    or more that open as a request does. (One word is not enough: "Stop the timer." asks for something; nor is a
    request of one: "Stop that noise."; and a filler after the phrase may be the request's: "...stop is water wet".)"""
    tokens = text.split()
    ends = {words_of(p)[-1] for p in phrases if words_of(p)}
    for k in range(min(MAX_COMMAND_WORDS, len(tokens) - REQUEST_MIN_WORDS), 1, -1):
        opening, after = " ".join(tokens[:k]), " ".join(tokens[k:])
        request = words_of(after)
        if set(words_of(opening)[-1:]) & ends and len(request) >= REQUEST_MIN_WORDS and request[0] in REQUEST_OPENERS \
                and only_asks_to_stop(opening, phrases, first_word_misheard=True):
            return after
    return text


ECHO_MIN_WORDS = 2  # one word that is also in the reply ("Paris?") may well be the user's own
ECHO_SHARE = 0.75  # ...but this share of a transcript's words said in the same order in a reply is its echo...
ECHO_OPENING_WORDS = 4  # ...and, for speech that began over the reply's echo, one that opens with this many of a
ECHO_OPENING_SHARE = 0.5  # reply's opening words, this share of it (Whisper mishears an echo's cut-off tail)...
ECHO_ENDING_WORDS = 3  # ...or ends with this many of its closing words, that share of it (the echo's start masked)
ECHO_ALIKE = 0.7  # ...or (quieter than the user) its letters are this alike a stretch of the reply (difflib's ratio)


def echoes(transcript: str, said: list[str] | tuple[str, ...], over_echo: bool = False,
           phrases: tuple[str, ...] = (), alike: bool = False) -> bool:
    """The transcript is the assistant's own recent reply (`said`) heard back from a speaker with no echo
    cancellation: at least ECHO_MIN_WORDS words, ECHO_SHARE of them found in the same order in one of those replies
    (Whisper hears an echo in part, may miss or mishear a word, and writes numbers in digits). A question that reuses
    the reply's words in its own order ("What is the capital of France?" after "The capital of France is Paris.") is
    not an echo.
    over_echo: the speech began over the reply's audible echo and did not interrupt it; then opening as the reply
    opened, with ECHO_OPENING_WORDS words or more (a shorter reply's all but its last) that are ECHO_OPENING_SHARE
    of it, is its echo too ("The capital of Japan is still there." for "The capital of Japan is Tokyo."), and so is
    one that ends as a reply ended, with ECHO_ENDING_WORDS of its words or more, that share of it ("Air 12, once in a
    year." for "There are 12 months in a year.": the canceller took the echo's start). Not for any speech, and not
    a run from inside the reply: a user's correction, or a quick answer, may reuse its words ("The meeting is at
    four, not three."; "Set a timer for five, please." after "Should I set a timer for ten minutes?"); nor a
    question after a reply that asked nothing: a follow-up reuses its opening or its end ("Water is what?", "How
    many days in a year?"); nor speech that holds one of `phrases` (stop commands) the reply lacks.
    alike: ...and it was quieter than the user's own voice: then one whose letters are ECHO_ALIKE of a stretch of
    the reply is its echo too (Whisper heard the whole echo wrong: "Yes, there is room." for "Yes, the Earth is
    round." 0.72; "Wait, stop. What" against a reply 0.3-0.55; but the user's own "See you later." after "Bye!
    Talk to you later." 0.82, so only for speech that was not at their level), or the reply was one of the
    assistant's stock phrases, which no user says back ("Sorry. I did catch that. Did you say that?" for "Sorry, I
    didn't catch that. Could you say it again?" was answered)."""
    if len(words_of(transcript)) < ECHO_MIN_WORDS:  # ("5pm?" is one word, though said_words makes it two)
        return False
    words = said_words(transcript)
    spoken = f" {' '.join(words_of(transcript))} "
    commands = [p for p in _spaced(phrases) if p in spoken]
    for reply in said:
        theirs = said_words(reply)  # (the reply's "Two plus two equals four." comes back "2 plus 2 equals 4.")
        replied = f" {' '.join(words_of(reply))} "
        if any(p not in replied for p in commands):  # ("Wait, stop." is the user's)
            continue
        if _in_order(words, theirs) >= ECHO_SHARE * len(words):
            return True
        if over_echo and not (asks(transcript) and not asks(reply)):  # (a follow-up question reuses its words)
            # (a reply shorter than the opening run: all its words but the last, "Water is flat." for "Water is wet.")
            opening = min(ECHO_OPENING_WORDS, max(ECHO_MIN_WORDS, len(theirs) - 1))
            for run, needed in ((_alike_from_start(words, theirs), opening),
                                (_alike_from_start(words[::-1], theirs[::-1]), ECHO_ENDING_WORDS)):
                if run >= needed and run >= ECHO_OPENING_SHARE * len(words):
                    return True
            if (alike or reply in STOCK_PHRASES) and _letters_alike(words, theirs, ECHO_ALIKE):
                return True
    return False


def _letters_alike(words: list[str], theirs: list[str], at_least: float) -> bool:
    """`words` are at least that alike, letter by letter, a stretch of `theirs` of about as many words."""
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(" ".join(words))  # (difflib caches what it learns of its second sequence)
    for start in range(len(theirs)):
        for length in range(max(1, len(words) - 2), len(words) + 3):
            matcher.set_seq1(" ".join(theirs[start:start + length]))
            if matcher.real_quick_ratio() >= at_least and matcher.quick_ratio() >= at_least \
                    and matcher.ratio() >= at_least:
                return True
    return False


def asks(text: str) -> bool:
    """The words ask something: a question mark, or a question's first word ("How many days in a year?")."""
    words = words_of(text)
    return text.strip().endswith("?") or bool(words) and words[0] in QUESTION_WORDS | MODAL_WORDS


def _alike_from_start(a: list[str], b: list[str]) -> int:
    """How many words `a` and `b` open with alike."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _in_order(a: list[str], b: list[str]) -> int:
    """How many of `a`'s words appear in `b` in the same order (the longest common subsequence)."""
    row = [0] * (len(b) + 1)
    for word in a:
        diagonal = 0
        for j, other in enumerate(b, 1):
            diagonal, row[j] = row[j], diagonal + 1 if word == other else max(row[j], row[j - 1])
    return row[-1]


_ASKED_AGAIN = re.compile(r"\b(didn't|did not|couldn't|could not|can't|cannot)\s+(quite\s+)?(catch|make out|understand|"
                          r"hear)\s+(that|you|what you said|it)\b", re.I)
ASKED_AGAIN_MAX_WORDS = 16  # a reply that says so is short; a longer one answers something


def asks_again(reply: str) -> bool:
    """Does the reply say, in its first sentence, that it did not catch what the user said (ASK_AGAIN, or the model
    told so by the LLM worker's sense check)?"""
    reply = reply.replace("\u2019", "'").strip()
    first = re.split(r"(?<=[.!?])\s", reply, maxsplit=1)[0]
    return len(reply.split()) <= ASKED_AGAIN_MAX_WORDS and bool(_ASKED_AGAIN.search(first))
