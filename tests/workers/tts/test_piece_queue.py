"""The voice's queue: a reply's first piece goes before other replies' later pieces, and nothing else moves."""

from __future__ import annotations

import queue
import threading

import pytest

from vita.messages import CancelTurn, Shutdown, TtsPiece
from workers.tts.piece_queue import MAX_PASSED, PieceQueue

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def piece(session: str, turn: int, seq: int, text: str = "words", last: bool = False) -> TtsPiece:
    return TtsPiece(session, turn, seq, text, last=last)


def drain(pieces: PieceQueue) -> list:
    out = []
    while pieces.qsize():
        out.append(pieces.get(timeout=0))
    return out


def test_a_first_piece_is_spoken_before_another_reply_s_later_sentences():
    pieces = PieceQueue(maxsize=10)
    later = [piece("a", 1, 1), piece("a", 1, 2), piece("a", 1, 3, "", last=True)]
    for message in later:
        pieces.put(message)
    first = piece("b", 4, 0)
    pieces.put(first)
    assert drain(pieces) == [first, *later]


def test_first_pieces_keep_their_order_and_a_turn_s_pieces_are_never_reordered():
    pieces = PieceQueue(maxsize=10)
    sent = [piece("a", 1, 0), piece("a", 1, 1), piece("b", 2, 0), piece("b", 2, 1), piece("c", 3, 0)]
    for message in sent:
        pieces.put(message)
    got = drain(pieces)
    assert [(p.session_id, p.seq) for p in got] == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1)]
    for session in "abc":  # each turn's own pieces in the order they came
        assert [p.seq for p in got if p.session_id == session] == sorted(p.seq for p in got if p.session_id == session)


def test_everything_that_is_not_a_first_piece_keeps_its_place():
    pieces = PieceQueue(maxsize=10)
    sent = [piece("a", 1, 1), CancelTurn("a", 1), piece("a", 1, 2)]
    for message in sent:
        pieces.put(message)
    assert drain(pieces) == sent


def test_get_times_out_when_empty_and_put_waits_while_full():
    pieces = PieceQueue(maxsize=2)
    with pytest.raises(queue.Empty):
        pieces.get(timeout=0.01)
    pieces.put(piece("a", 1, 1))
    pieces.put(piece("a", 1, 2))
    with pytest.raises(queue.Full):
        pieces.put(piece("a", 1, 3), timeout=0.01)
    put_done = threading.Event()

    def put_when_room() -> None:
        pieces.put(piece("a", 1, 3))
        put_done.set()

    waiter = threading.Thread(target=put_when_room)
    waiter.start()
    assert not put_done.wait(0.05)  # still full: the reader waits (the LLM worker's put then times out)
    assert pieces.get(timeout=1).seq == 1
    assert put_done.wait(2)
    waiter.join(2)
    assert [p.seq for p in drain(pieces)] == [2, 3]


def test_a_waiting_piece_lets_at_most_a_few_first_pieces_pass():
    pieces = PieceQueue(maxsize=20)
    waiting = piece("a", 1, 1)
    pieces.put(waiting)
    firsts = [piece(f"s{i}", i, 0) for i in range(MAX_PASSED + 2)]
    for message in firsts:
        pieces.put(message)
    got = drain(pieces)
    assert got.index(waiting) == MAX_PASSED  # then its turn, whoever else is waiting to start
    assert [p for p in got if p is not waiting] == firsts


def test_no_first_piece_passes_a_shutdown():
    pieces = PieceQueue(maxsize=10)
    sent = [piece("a", 1, 1), Shutdown(), piece("b", 2, 0)]
    for message in sent:
        pieces.put(message)
    assert drain(pieces) == sent


def test_every_waiting_piece_is_passed_at_most_a_few_times_not_only_the_oldest():
    pieces = PieceQueue(maxsize=20)
    a, b = piece("a", 1, 1), piece("b", 2, 1)
    firsts = [piece(f"s{i}", i, 0) for i in range(6)]
    for message in [a, b, *firsts]:
        pieces.put(message)
    got = drain(pieces)
    assert got.index(a) == MAX_PASSED and got.index(b) == MAX_PASSED + 1  # b too waits behind three, not six
