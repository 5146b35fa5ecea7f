"""Calls of one model turn that change one state container all keep their changes.

In process the calls of a turn share the session's state; on workers each job changes its
own copy. Three calls that each append to a list and add a key to a dict read from state
(and count in it) used to leave only the last answer's copy: one item in the cart.
"""

from __future__ import annotations

import pytest

from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.state_merge import merge_state_writes
from tests.apps_state import ITEMS

START = {"cart": ["bread"], "basket": {"bread": 1, "count": 1}, "note": "keep"}


# shop's calls run as jobs (on workers, or the embedded runtime's), shop_plain's in process.
# A number is not merged: each job counted from the 1 it saw, and the later call's 2 stays
# (in process the calls count 2, 3, 4). Lists and dicts keep every call's change either way.
@pytest.mark.parametrize(("app", "count"), [("shop", 2), ("shop_plain", 4)])
async def test_every_call_of_a_turn_keeps_its_change_to_a_shared_container(backend, app, count):
    session_id = await backend.create_session(app, "u", state=START)
    inv = await backend.enqueue(app, "u", "buy fruit", session_id=session_id)
    record = await backend.wait(app, inv, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error

    answers = [e for e in await backend.events(app, inv) if e.get_function_responses()]
    assert len(answers) == 1 and len(answers[0].get_function_responses()) == 3
    expected = {"cart": ["bread", *ITEMS],
                "basket": {"bread": 1, "count": count, **dict.fromkeys(ITEMS, 1)}}
    delta = answers[0].actions.state_delta
    assert (sorted(delta["cart"]), delta["basket"]) == (sorted(expected["cart"]), expected["basket"])
    state = await backend.session_state(app, "u", session_id)
    assert sorted(state["cart"]) == sorted(expected["cart"])
    assert state["cart"][0] == "bread" and state["basket"] == expected["basket"]
    assert state["note"] == "keep"


def test_a_later_write_merges_with_the_earlier_ones_against_what_it_saw():
    base = {"cart": ["a"], "basket": {"a": 1, "gone": 1, "n": 1}, "title": "x"}
    first = ({"cart": ["a", "b"], "basket": {"a": 1, "b": 1, "gone": 1, "n": 2}},
             {k: base[k] for k in ("cart", "basket")})
    second = ({"cart": ["a", "c"], "basket": {"a": 2, "c": 1, "n": 2}, "title": "y"},
              {k: base[k] for k in ("cart", "basket", "title")})
    assert merge_state_writes([first, second]) == {
        "cart": ["a", "b", "c"],  # both extended the list they saw
        "basket": {"a": 2, "b": 1, "n": 2, "c": 1},  # "gone" removed by the second; "n": both 2
        "title": "y",
    }


def test_what_cannot_be_merged_takes_the_later_value():
    base = {"cart": ["a", "b"], "count": 1}
    first = ({"cart": ["b"], "count": 2}, base)  # the list shrank: not an extension
    second = ({"cart": ["a", "b", "c"], "count": 3}, base)
    assert merge_state_writes([first, second]) == {"cart": ["a", "b", "c"], "count": 3}
    # A write whose snapshot is not known (a client's, an older worker's) wins as it is.
    assert merge_state_writes([({"cart": ["a", "x"]}, base), ({"cart": ["y"]}, None)]) \
        == {"cart": ["y"]}


def test_keys_both_calls_created_are_merged_as_from_nothing():
    first = ({"tags": ["x"], "seen": {"x": 1}}, {})
    second = ({"tags": ["y"], "seen": {"y": 1}}, {})
    assert merge_state_writes([first, second]) == {"tags": ["x", "y"], "seen": {"x": 1, "y": 1}}
