"""The transition table, exhaustively: every (from, to) pair for every actor, as DESIGN.md says."""

from __future__ import annotations

import itertools

import pytest

from corral.domain import status as st
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.errors import IllegalTransition, RefusedError
from tests.domain import lifecycle_table as design

PAIRS = list(itertools.product(design.STATUSES, design.STATUSES))


def test_the_design_names_exactly_the_implemented_statuses() -> None:
    assert {s.value for s in Status} == set(design.STATUSES)
    assert {a.value for a in Actor} == set(design.ACTORS)


@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_pair_for_every_actor(src: str, dst: str) -> None:
    for actor in design.ACTORS:
        expected = design.allowed(src, dst, actor)
        got = st.is_allowed(Status(src), Status(dst), Actor(actor))
        assert got is expected, f"{src} -> {dst} by {actor}: design says {expected}, code says {got}"
        if expected:
            st.check_transition(Status(src), Status(dst), Actor(actor))
        else:
            with pytest.raises(IllegalTransition) as info:
                st.check_transition(Status(src), Status(dst), Actor(actor))
            err = info.value
            assert err.exit_code == 3
            assert isinstance(err, RefusedError)
            assert err.code == "illegal-transition"
            assert err.current == src
            assert err.target == dst
            assert set(err.allowed) == design.targets(src, actor)
            for target in design.targets(src, actor):
                assert target in err.message, f"{target!r} missing from: {err.message}"


@pytest.mark.parametrize("src", design.STATUSES)
def test_allowed_targets_match_the_design(src: str) -> None:
    for actor in design.ACTORS:
        assert {t.value for t in st.allowed_targets(Status(src), Actor(actor))} == design.targets(src, actor)
    # Without an actor: the table itself, zombie included where the system may set it.
    assert {t.value for t in st.allowed_targets(Status(src))} == design.targets(src, "system")


@pytest.mark.parametrize("src", sorted(design.ZOMBIE_SOURCES))
def test_any_non_terminal_status_goes_to_zombie_only_by_the_system(src: str) -> None:
    st.check_transition(Status(src), Status.ZOMBIE, Actor.SYSTEM)
    for actor in design.ACTORS:
        if actor == "system":
            continue
        with pytest.raises(IllegalTransition) as info:
            st.check_transition(Status(src), Status.ZOMBIE, Actor(actor))
        assert "zombie" not in info.value.allowed
        assert info.value.hint is not None and "system" in info.value.hint


@pytest.mark.parametrize("src", sorted(design.TERMINAL))
def test_terminal_statuses_never_go_to_zombie(src: str) -> None:
    for actor in design.ACTORS:
        assert not st.is_allowed(Status(src), Status.ZOMBIE, Actor(actor))


def test_edges_the_design_rules_out_explicitly() -> None:
    system = Actor.SYSTEM
    # accept refuses while violations are pending: conflict -> merging does not exist.
    assert not st.is_allowed(Status.CONFLICT, Status.MERGING, system)
    # interrupted cannot go to merging or complete.
    assert not st.is_allowed(Status.INTERRUPTED, Status.MERGING, system)
    assert not st.is_allowed(Status.INTERRUPTED, Status.COMPLETE, system)
    # working cannot go to pairing or abandoned (the agent is running).
    assert not st.is_allowed(Status.WORKING, Status.PAIRING, Actor.HUMAN)
    assert not st.is_allowed(Status.WORKING, Status.ABANDONED, Actor.HUMAN)
    # blocked cannot go directly to complete; merging cannot be abandoned.
    assert not st.is_allowed(Status.BLOCKED, Status.COMPLETE, system)
    assert not st.is_allowed(Status.MERGING, Status.ABANDONED, Actor.HUMAN)
    # the same status again is a no-op: legal, yet no edge of the table and no target.
    for s in Status:
        assert st.is_allowed(s, s, system) and st.is_noop(s, s)
        assert st.trigger(s, s) is None and s not in st.allowed_targets(s, system)


def test_trigger_and_sources_agree_with_the_table() -> None:
    for src, dst in PAIRS:
        legal_somehow = design.allowed(src, dst, "system") and src != dst  # staying is no edge
        assert (st.trigger(Status(src), Status(dst)) is not None) is legal_somehow
    for dst in design.STATUSES:
        expected = {src for src in design.STATUSES if src != dst and design.allowed(src, dst, "system")}
        assert {s.value for s in st.sources_for(Status(dst))} == expected


@pytest.mark.parametrize("value", design.STATUSES)
def test_categories(value: str) -> None:
    s = Status(value)
    assert st.is_terminal(s) is (value in design.TERMINAL)
    assert st.is_blocked(s) is (value in design.BLOCKED)
    assert st.is_active(s) is (value in design.ACTIVE)


def test_category_sets() -> None:
    assert {s.value for s in st.TERMINAL} == design.TERMINAL
    assert {s.value for s in st.PAUSED} == design.BLOCKED
    assert {s.value for s in st.ACTIVE} == design.ACTIVE
    # submitted and backlog are resting, not active.
    for value in design.RESTING_NOT_ACTIVE:
        assert not st.is_active(Status(value))
        assert Status(value) in st.RESTING
    assert {s.value for s in st.RESTING} == design.RESTING
    assert {s.value for s in st.PAUSED} == {"blocked", "conflict"}


def test_illegal_transition_message_names_what_it_was_doing() -> None:
    with pytest.raises(IllegalTransition) as info:
        st.check_transition(Status.WORKING, Status.ABANDONED, Actor.HUMAN, what="close fix-login")
    err = info.value
    assert err.message.startswith("Cannot close fix-login:")
    for target in ("blocked", "conflict", "interrupted", "submitted"):
        assert target in err.message
    assert "zombie" not in err.message
    assert err.to_json() == {"code": "illegal-transition", "message": err.message, "hint": err.hint}
