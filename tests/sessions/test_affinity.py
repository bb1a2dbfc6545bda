"""router/sessions/affinity.py: a session's replica and slot on a tier."""

from __future__ import annotations

from router.sessions import Session
from router.sessions.affinity import Affinity

TOOLS = [{"type": "function", "function": {"name": "Read"}}]


def main(sid: str, system: str = "agent") -> Session:
    return Session(sid, {"messages": [{"role": "system", "content": system}], "tools": TOOLS})


def side(sid: str) -> Session:
    return Session(sid, {"messages": [{"role": "user", "content": "title?"}]}, side=True)


def test_a_session_keeps_its_slot_turn_after_turn() -> None:
    a = Affinity(slots=4, side_slots=1)
    slots = []
    for _ in range(3):
        lease = a.place(main("s1"))
        slots.append(lease.slot)
        lease.release()
    assert slots[0] in (1, 2, 3) and slots == [slots[0]] * 3


def test_side_calls_never_take_a_main_prompts_slot() -> None:
    a = Affinity(slots=3, side_slots=1)
    held = {a.place(main(f"s{i}")).slot for i in range(2)}  # both main slots taken and busy
    for i in range(5):
        lease = a.place(side(f"s{i}"))
        assert lease.slot == 0
        lease.release()
    assert held == {1, 2}
    assert [owner[0] if owner else None for owner in a.held()[0][1:]] == ["s0", "s1"]


def test_sub_agents_of_one_conversation_get_slots_of_their_own() -> None:
    a = Affinity(slots=4, side_slots=1)
    first = a.place(main("s", "main loop"))
    second = a.place(main("s", "search sub-agent"))
    assert first.slot != second.slot


def test_a_new_session_takes_a_free_slot_then_the_idle_one_used_longest_ago() -> None:
    a = Affinity(slots=3, side_slots=1)
    for sid in ("old", "new"):
        a.place(main(sid)).release()
    busy = a.place(main("new"))  # "new" is in a call now
    third = a.place(main("third"))
    assert third.slot == a.held()[0].index(("third", main("third").prefix))
    assert third.slot != busy.slot  # evicts "old", idle and used longest ago, not the busy one
    assert a.evicted == 1


def test_every_slot_busy_queues_behind_the_one_used_longest_ago() -> None:
    a = Affinity(slots=2, side_slots=1)
    first = a.place(main("a"))
    second = a.place(main("b"))
    assert first.slot == second.slot == 1  # one main slot: the server queues b behind a


def test_replicas_are_stable_per_session_and_spread() -> None:
    a, b = Affinity(replicas=3), Affinity(replicas=3)  # two router processes agree
    picks = {sid: a.place(main(sid)).replica for sid in (f"s{i}" for i in range(60))}
    assert all(b.place(main(sid)).replica == r for sid, r in picks.items())
    assert set(picks.values()) == {0, 1, 2}
    assert a.place(main("s1")).slot is None  # no slots: the server (vLLM, SGLang) caches prefixes itself


def test_no_session_and_no_slots_leave_the_choice_to_the_server() -> None:
    assert Affinity(slots=0).place(main("s")).slot is None
    lease = Affinity(slots=4, side_slots=1).place(None)
    assert lease.slot == 0  # a call of no session (a verifier's, a shadow's) is a side call
    lease.release()
    lease.release()  # twice is harmless


def test_a_new_session_of_the_same_agent_takes_the_slot_that_read_its_instructions() -> None:
    a = Affinity(slots=4, side_slots=1)
    a.place(main("first", "claude code")).release()
    a.place(main("other", "codex")).release()
    busy = a.place(main("second", "claude code"))  # the same instructions and tools: the first's slot
    assert busy.slot == 1
    third = a.place(main("third", "claude code"))  # that slot is busy now: a free one
    assert third.slot == 3
