"""The gh adapter against the scripted forge: corral's own calls through the real gh, over TLS."""

from __future__ import annotations

import pytest

from corral.adapters.gh_forge import GhForge, parse_remote
from corral.adapters.process import SubprocessRunner
from corral.errors import ForgeUnavailable
from tests.conftest import git


def _gh(forge) -> GhForge:
    found = parse_remote(forge.remote_url)
    assert found is not None
    return GhForge(SubprocessRunner(), found)


def test_remote_urls_name_their_forge_repository():
    assert parse_remote("https://github.com/acme/widgets.git").slug == "github.com/acme/widgets"
    assert parse_remote("git@github.com:acme/widgets.git").slug == "github.com/acme/widgets"
    assert parse_remote("https://127.0.0.1:8443/acme/widgets").slug == "127.0.0.1:8443/acme/widgets"
    assert parse_remote("/srv/git/widgets.git") is None


def test_a_pull_request_is_opened_read_and_merged_pinned_to_its_head(forge, repo):
    gh = _gh(forge)
    assert gh.login() == "person"
    git(repo, "switch", "-q", "-c", "feature")
    (repo / "f.txt").write_text("one\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "-m", "feature")
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "push", "-q", "origin", "feature")
    pull = gh.open_pull("feature", "main", "A feature", "why")
    assert gh.find_pull("feature") == pull and pull.head_oid == tip
    state = gh.pulls([pull.number])[pull.number]
    assert state.state == "OPEN" and [c.state for c in state.checks] == ["pending"]
    refused = gh.merge(pull.number, tip, "A feature", "body")
    assert refused.sha is None and "ci" in (refused.reason or "")
    forge.finish_checks(pull.number, "FAILURE", log="error: test_x failed\n")
    state = gh.pulls([pull.number])[pull.number]
    assert [c.name for c in state.failing] == ["ci"] and "test_x" in gh.job_log(state.failing[0].job_id)
    forge.finish_checks(pull.number)
    assert gh.merge(pull.number, "0" * 40, "t", "m").moved  # pinned: a head other than the reviewed one is refused
    merged = gh.merge(pull.number, tip, "A feature", "Corral-Task: t1")
    assert merged.sha and gh.pulls([pull.number])[pull.number].merge_commit == merged.sha


def test_an_outage_and_a_rate_limit_are_unavailable_not_answers(forge):
    gh = _gh(forge)
    forge.fail_next(1)
    with pytest.raises(ForgeUnavailable) as outage:
        gh.login()
    assert outage.value.retry_at is None
    forge.fail_next(1, reset_in=120)
    with pytest.raises(ForgeUnavailable) as limited:
        gh.pulls([1])
    assert limited.value.retry_at is not None
    assert gh.login() == "person"
