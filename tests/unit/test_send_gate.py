"""Reads before writes (llmload.loadgen.transport.send_gate): a quiet loop sends at once; sends that come
after the turn's slice wait in line, are let go in order after the next poll, and a user alone
in line is still let go (its wait keeps the loop alive)."""

from __future__ import annotations

import time

import gevent

from llmload.loadgen.transport.send_gate import SEND_SLICE_S, send_gate


def _poll() -> None:
    """Let the loop poll once (a zero sleep runs its callbacks without a poll; a timer's does)."""
    gevent.sleep(0.0005)


def _use_up_the_turn() -> None:
    """Poll, then spend the turn's slice without polling."""
    _poll()
    until = time.perf_counter() + 2 * SEND_SLICE_S
    while time.perf_counter() < until:
        pass


def test_a_quiet_loop_sends_at_once() -> None:
    gate = send_gate()
    _poll()
    polled = time.perf_counter()
    order: list[str] = []
    other = gevent.spawn(order.append, "other greenlet")
    gate.wait_turn()  # returns without yielding: the other greenlet has not run yet
    order.append("sent")
    other.join()
    # unless this process was descheduled for the whole slice between the poll and the send
    assert order == ["sent", "other greenlet"] or time.perf_counter() - polled >= SEND_SLICE_S


def test_late_sends_wait_in_line_and_go_in_order() -> None:
    gate = send_gate()
    order: list[int] = []

    def user(i: int) -> None:
        gate.wait_turn()
        order.append(i)

    _use_up_the_turn()
    users = [gevent.spawn(user, i) for i in range(5)]
    _use_up_the_turn()  # they start in this turn, with its slice spent: all of them queue
    gevent.joinall(users, timeout=5)
    assert order == [0, 1, 2, 3, 4]


def test_a_user_alone_in_line_is_let_go() -> None:
    """Nothing else runs on the loop (no socket, no timer but the gate's): the wait ends all the
    same, where a timer the loop did not hold ended it with "would block forever"."""
    gate = send_gate()
    _use_up_the_turn()
    gate.wait_turn()
