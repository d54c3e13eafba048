"""The substate with an agent's waits on subtasks and its progress line: one derivation, the seed's precedence.

Harness phase (and the retry, the usage-limit wait) > waiting on … > the agent kinds; the progress
line decorates only the agent kinds and a wait; a dead run stays not-alive whatever it marked.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral.domain.status import Status
from corral.domain.substate import Live, Waiting, render_status, substate, waited, waits_summary

W = Status.WORKING


def live(**kw: object) -> Live:
    return Live(alive=True, **kw)  # type: ignore[arg-type]


def test_one_wait_reads_its_ref_and_how_long() -> None:
    assert substate(W, live(phase="work", waits=(Waiting("fix-foo", 130),))) == "waiting on fix-foo (2m10s)"
    assert render_status(W, "waiting on fix-foo (2m10s)") == "working(waiting on fix-foo (2m10s))"


def test_two_waits_list_both_and_more_summarize() -> None:
    two = (Waiting("a", 5), Waiting("b", 75))
    assert substate(W, live(waits=two)) == "waiting on a (5s), b (1m15s)"
    four = (*two, Waiting("c", 1), Waiting("d", 2))
    assert substate(W, live(waits=four)) == "waiting on a, b +2"


def test_one_target_waited_on_twice_reads_once_by_its_longer_wait() -> None:
    assert waits_summary((Waiting("a", 5), Waiting("a", 50))) == "waiting on a (50s)"


def test_waited_words() -> None:
    assert [waited(s) for s in (0, 9.9, 60, 130, 3599, 3600, 3725, -4)] == [
        "0s",
        "9s",
        "1m00s",
        "2m10s",
        "59m59s",
        "1h00m",
        "1h02m",
        "0s",
    ]


def test_waiting_outranks_the_agent_kinds() -> None:
    for kind in ("ask", "pre-accept", "start", None):
        assert substate(W, live(kind=kind, waits=(Waiting("sub", 1),))) == "waiting on sub (1s)"


def test_a_harness_phase_a_retry_and_the_usage_limit_outrank_waiting_and_progress() -> None:
    marks = {"waits": (Waiting("sub", 1),), "progress": "running migration 3/7"}
    assert substate(W, live(phase="check", **marks)) == "harness:check"
    assert substate(W, live(phase="sync", **marks)) == "harness:sync"
    retry = live(phase="retrying", retry_attempt=2, retry_class="transient_overload", retry_reason="529", **marks)
    assert substate(W, retry) == "retrying: attempt 2 (transient_overload): 529"
    harness_retry = live(phase="work", retry_class="transient_overload", **marks)
    assert substate(W, harness_retry).startswith("retrying:")  # type: ignore[union-attr]
    limit = live(phase="waiting", limit_resets_at=None, **marks)
    assert substate(W, limit).startswith("waiting: usage limit")  # type: ignore[union-attr]


def test_progress_decorates_the_agent_kinds() -> None:
    p = "running migration 3/7"
    assert substate(W, live(progress=p)) == "agent: running migration 3/7"
    assert substate(W, live(kind="ask", progress=p)) == "agent:answering: running migration 3/7"
    assert substate(W, live(kind="pre-accept", progress=p)) == "agent:pre-accept: running migration 3/7"
    assert render_status(W, substate(W, live(progress=p))) == "working(agent: running migration 3/7)"


def test_progress_beside_a_wait_follows_it() -> None:
    got = substate(W, live(waits=(Waiting("fix-foo", 130),), progress="split the parser"))
    assert got == "waiting on fix-foo (2m10s) · split the parser"


def test_blank_progress_is_no_progress() -> None:
    assert substate(W, live(progress="  \n ")) == "agent"


def test_a_marker_never_resurrects_a_dead_run() -> None:
    dead = Live(alive=False, phase="work", waits=(Waiting("sub", 1),), progress="still here")
    assert substate(W, dead) == "not-alive"
    assert substate(W, None) == "not-alive"


def test_only_working_tasks_have_a_substate() -> None:
    marks = live(waits=(Waiting("sub", 1),), progress="x")
    assert all(substate(s, marks) is None for s in Status if s is not W)


refs = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=12)


@given(
    st.lists(st.tuples(refs, st.floats(min_value=0, max_value=10**6)), max_size=8),
    st.sampled_from([None, "work", "check", "sync", "retrying", "waiting"]),
    st.sampled_from([None, "ask", "pre-accept", "start"]),
    st.one_of(st.none(), st.text(max_size=40)),
    st.booleans(),
)
def test_precedence_holds_for_any_marks(
    waits: list[tuple[str, float]], phase: str | None, kind: str | None, progress: str | None, alive: bool
) -> None:
    marks = tuple(Waiting(r, s) for r, s in waits)
    facts = Live(alive=alive, phase=phase, kind=kind, waits=marks, progress=progress)
    got = substate(W, facts)
    assert got is not None
    if not alive:
        assert got == "not-alive"
    elif phase == "waiting":
        assert got.startswith("waiting: usage limit")
    elif phase == "retrying":
        assert got.startswith("retrying:")
    elif phase not in (None, "work"):
        assert got == f"harness:{phase}"  # never the agent's waits or words
    elif marks:
        distinct = list(dict.fromkeys(r for r, _ in waits))
        assert got.startswith("waiting on " + distinct[0])
        if len(distinct) > 2:
            assert f" +{len(distinct) - 2}" in got
        else:
            assert all(r in got for r in distinct)
    else:
        kinds = {"ask": "agent:answering", "pre-accept": "agent:pre-accept"}
        head = kinds.get(kind or "", "agent")
        shown = " ".join((progress or "").split())
        assert got == (f"{head}: {shown}" if shown else head)
