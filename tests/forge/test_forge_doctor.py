"""doctor checks gh's login and that the remote is a repository on the forge."""

from __future__ import annotations

from tests.conftest import git


def _forge_checks(corral) -> list[dict]:
    checks = corral("doctor", "--json").json()["checks"]  # exits 1 while any check fails (a harness here)
    return [c for c in checks if c["name"] == "forge"]


def test_doctor_says_who_gh_is_and_which_repository_the_remote_is(fproj, corral, monkeypatch):
    _proj, _forge = fproj()
    (check,) = _forge_checks(corral)
    assert check["status"] == "ok" and "logged in" in check["message"] and "acme/widgets" in check["message"]
    monkeypatch.setenv("GH_ENTERPRISE_TOKEN", "wrong")
    (check,) = _forge_checks(corral)
    assert check["status"] == "fail" and "not logged in" in check["message"]
    assert check["hint"].startswith("gh auth login --hostname")


def test_doctor_fails_a_remote_that_is_no_repository_on_the_forge(fproj, corral, repo):
    _proj, forge = fproj()
    git(repo, "remote", "set-url", "origin", f"https://{forge.host}/acme/nothing.git")
    (check,) = _forge_checks(corral)
    assert check["status"] == "fail" and "acme/nothing" in check["message"]
