"""The CLI's manners through the real entry point: help, suggestions, global options, JSON Lines,
the diff pager, completion, delete's question, prune's dry run, refs, plain words and the demo."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from tests.cli.helpers import create, json_error, no_traceback, park, set_status, state_paths, to_working
from tests.cli.test_cli_turns import fake_env
from tests.cli.test_pair_terminal import Pty
from tests.conftest import git

WORK = [
    {"init": True},
    {"write": {"path": "feature.py", "content": "FEATURE = True\n"}},
    {"commit": "add feature"},
    {"result": "Feature added."},
]


def _corral_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "corral", *args]


def _closed(corral, ref: str, tmp_path: Path) -> None:
    """A task that ran, then was closed: deletable."""
    env = fake_env(tmp_path, WORK)
    corral.ok("create", "Ran then closed", "--ref", ref, env=env)
    corral.ok("start", ref, "--wait", env=env)
    corral.ok("close", ref, "-m", "not needed", env=env)


# -- help and suggestions -----------------------------------------------------------------------


@pytest.mark.parametrize("args", [(), ("config",), ("daemon",)])
def test_a_group_without_a_subcommand_prints_its_help(corral, args: tuple[str, ...]) -> None:
    result = corral(*args)
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Usage: corral {' '.join(args)}".rstrip() + " [OPTIONS] COMMAND")
    assert "error" not in result.stderr and result.stderr == ""
    assert "Commands:" in result.stdout


def test_an_unknown_command_suggests_the_nearest(corral) -> None:
    result = corral("lst")
    assert result.returncode == 2 and "No such command 'lst'" in result.stderr and "'list'" in result.stderr
    err = json_error(corral("acept", "--json"), 2, "usage")
    assert "'accept'" in err["message"]
    assert "'show'" in corral("config", "shwo").stderr


# -- global options before or after the command ------------------------------------------------


@pytest.mark.slow
def test_repo_and_json_go_before_or_after_the_command(corral, repo: Path, tmp_path: Path) -> None:
    create(corral, "Somewhere", "--ref", "somewhere")
    outside = tmp_path / "outside"
    outside.mkdir()
    for args in (
        ("--repo", str(repo), "list", "--json"),
        ("list", "--repo", str(repo), "--json"),
        ("--json", "list", "--repo", str(repo)),
        ("--repo", str(repo), "--json", "list"),
        ("list", f"--repo={repo}", "--json"),
        ("config", "get", "model", "--repo", str(repo), "--json"),
    ):
        result = corral(*args, cwd=outside)
        assert result.returncode == 0, (args, result.stderr)
        doc = json.loads(result.stdout)  # one JSON document on stdout, whichever the order
        if "tasks" in doc:
            assert [t["ref"] for t in doc["tasks"]] == ["somewhere"], args
    assert corral("list", cwd=outside).returncode == 2  # without --repo: not a repository
    shown = corral("show", "somewhere", "--repo", str(repo), cwd=outside)
    assert shown.returncode == 0 and "somewhere" in shown.stdout


# -- accept --json is JSON Lines ----------------------------------------------------------------


@pytest.mark.slow
def test_accept_json_is_json_lines_and_says_so(corral, tmp_path: Path) -> None:
    env = fake_env(tmp_path, WORK)
    corral.ok("create", "Add the feature", "--ref", "feat", env=env)
    corral.ok("start", "feat", "--wait", env=env)
    result = corral("accept", "feat", "--json", env=env)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]  # every line is one JSON object
    assert len(events) > 2 and all(isinstance(e, dict) and "event" in e for e in events)
    assert events[-1]["event"] == "result" and events[-1]["task"] == {"ref": "feat", "status": "complete"}
    assert "schema_version" not in events[-1]  # a line of a stream, not a document
    helped = corral.ok("accept", "--help").stdout
    assert "JSON Lines" in helped and '{"event": "error"' in helped
    docs = Path(__file__).parents[2] / "docs" / "cli.md"
    assert "accept" in docs.read_text() and "JSON Lines" in docs.read_text()


# -- diff on a terminal -------------------------------------------------------------------------


@pytest.mark.slow
def test_diff_on_a_terminal_is_coloured_and_paged_by_gits_pager(
    corral, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hostile = {"write": {"path": "title.txt", "content": "\x1b]0;pwned\x07 and \u202e\n"}}
    env = fake_env(tmp_path, [*WORK[:3], hostile, {"commit": "a hostile line"}, WORK[-1]])
    corral.ok("create", "Add the feature", "--ref", "feat", env=env)
    corral.ok("start", "feat", "--wait", env=env)
    plain = corral.ok("diff", "feat", env=env).stdout  # not a terminal: no colour, no pager
    assert "\x1b[" not in plain and "+FEATURE = True" in plain
    paged = tmp_path / "paged.txt"
    pager = tmp_path / "pager.py"
    pager.write_text(
        "import os, sys\n"
        f"open({str(paged)!r}, 'wb').write(sys.stdin.buffer.read() + ('LESS=' + os.environ.get('LESS', '')).encode())\n"
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("GIT_PAGER", f"{sys.executable} {pager}")
    term = Pty(_corral_argv("diff", "feat"), repo)
    assert term.finish() == 0, term.out
    text = paged.read_text()
    assert "add feature" in text and "FEATURE = True" in text
    assert "\x1b[32m+\x1b[m\x1b[32mFEATURE = True\x1b[m" in text  # git coloured it: green, as git diff does
    assert text.endswith("LESS=FRX")  # git's defaults for less
    assert "\x1b]0;" not in text and "\\x1b]0;pwned\\x07" in text and "\\u202e" in text  # the agent's escapes shown
    assert "FEATURE" not in term.out.decode("utf-8", "replace")  # it went to the pager, not the terminal
    # --no-pager: straight to the terminal, still coloured
    paged.unlink()
    direct = Pty(_corral_argv("diff", "feat", "--no-pager"), repo)
    assert direct.finish() == 0
    shown = direct.out.decode("utf-8", "replace")
    assert not paged.exists() and "\x1b[32mFEATURE = True" in shown
    assert "\x1b]0;" not in shown and "\\x1b]0;pwned" in shown


# -- completion ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_completion_prints_installs_and_completes_task_refs(corral, repo: Path, isolated_env: Path) -> None:
    for shell in ("bash", "zsh", "fish"):
        script = corral.ok("completion", shell).stdout
        assert "_CORRAL_COMPLETE" in script, shell
    installed = corral.json("completion", "bash", "--install")
    rc = isolated_env / "home" / ".bashrc"
    assert installed["file"] == str(rc) and rc.read_text() == 'eval "$(corral completion bash)"\n'
    assert corral.json("completion", "bash", "--install")["changed"] is False  # once only
    assert rc.read_text().count("corral completion bash") == 1
    create(corral, "Fix the login", "--ref", "fix-login")
    create(corral, "Fix the logout", "--ref", "fix-logout")
    create(corral, "Other", "--ref", "other")
    to_working(corral, "other")
    park(corral, "other")
    set_status(corral, "other", Status.ABANDONED)

    def complete(words: str, shell: str = "bash") -> str:
        env = {"_CORRAL_COMPLETE": f"{shell}_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
        result = corral(env=env)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        return result.stdout

    assert complete("corral show fix") == "plain,fix-login\nplain,fix-logout\n"
    assert complete("corral diff o") == "plain,other\n"
    assert complete("corral wait fix-logi") == "plain,fix-login\n"  # a command module it does not own
    assert "fix-login" in complete("corral show f", "zsh")
    assert complete("corral sh") == "plain,show\n"


def test_completion_without_a_store_completes_nothing_quietly(corral, tmp_path: Path) -> None:
    outside = tmp_path / "nowhere"
    outside.mkdir()
    env = {"_CORRAL_COMPLETE": "bash_complete", "COMP_WORDS": "corral show f", "COMP_CWORD": "2"}
    result = corral(env=env, cwd=outside)
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "", "")


# -- delete asks --------------------------------------------------------------------------------


@pytest.mark.slow
def test_delete_without_a_terminal_needs_yes(corral, tmp_path: Path) -> None:
    _closed(corral, "gone", tmp_path)
    refused = corral("delete", "gone")
    assert refused.returncode == 2 and "--yes" in refused.stderr and "no terminal" in refused.stderr
    assert corral.json("show", "gone")["task"]["ref"] == "gone"  # still there
    create(corral, "Live", "--ref", "live")
    assert corral("delete", "live", "--yes").returncode == 3  # the state is checked, --yes or not
    assert corral("delete", "live").returncode == 3  # before any question
    assert corral.json("delete", "gone", "--yes")["deleted"]["ref"] == "gone"
    assert corral("show", "gone").returncode == 4


@pytest.mark.slow
def test_delete_on_a_terminal_asks(corral, repo: Path, tmp_path: Path) -> None:
    _closed(corral, "asked", tmp_path)
    no = Pty(_corral_argv("delete", "asked"), repo)
    no.read_until("[y/N]")
    no.write(b"n\n")
    assert no.finish() == 1
    assert "was not deleted" in no.out.decode()
    assert corral.json("show", "asked")["task"]["ref"] == "asked"
    yes = Pty(_corral_argv("delete", "asked"), repo)
    assert "Delete asked and everything kept for it" in yes.read_until("[y/N]")
    yes.write(b"y\n")
    assert yes.finish() == 0 and "Deleted asked" in yes.out.decode()
    assert corral("show", "asked").returncode == 4


# -- prune --dry-run ----------------------------------------------------------------------------


@pytest.mark.slow
def test_prune_dry_run_lists_and_removes_nothing(corral) -> None:
    create(corral, "Keeps the store real", "--ref", "real")
    where = state_paths(corral)
    stale = Path(where["worktrees"]) / "no-such-task"
    stale.mkdir(parents=True)
    orphan = Path(where["diagnostics"]) / "deadbeef-task"
    orphan.mkdir(parents=True)
    (orphan / "evidence.json").write_text("{}")
    dry = corral.json("prune", "--dry-run")["pruned"]
    assert dry["dry_run"] is True
    assert dry["worktrees"]["removed"] == [str(stale)]
    assert dry["diagnostics"]["orphaned_tasks"] == ["deadbeef-task"]
    assert stale.is_dir() and (orphan / "evidence.json").is_file()  # nothing removed
    text = corral.ok("prune", "-n").stdout
    assert "Dry run: nothing was removed." in text and "would remove" in text and str(stale) in text
    done = corral.json("prune")["pruned"]
    assert done["dry_run"] is False and done["worktrees"]["removed"] == [str(stale)]
    assert not stale.exists() and not orphan.exists()


# -- refs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("goal", "ref"),
    [
        ("Café crème", "cafe-creme"),
        ("Straße für Bäume", "strasse-fur-baume"),
        ("Ærø naïve façade", "aero-naive-facade"),
        ("Fix the login timeout", "fix-the-login-timeout"),
        ("Привет", "task"),
    ],
)
def test_refs_transliterate_letters(corral, goal: str, ref: str) -> None:
    assert create(corral, goal)["ref"] == ref
    assert git(Path(corral.cwd), "check-ref-format", f"refs/heads/corral/{ref}") == ""


# -- plain words --------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_internal_status_never_reaches_the_error_line(corral) -> None:
    create(corral, "Landing", "--ref", "landing")
    set_status(corral, "landing", Status.ZOMBIE, actor=Actor.SYSTEM)
    for args in (("start", "landing"), ("unblock", "landing", "-m", "go"), ("stop", "landing")):
        result = corral(*args)
        no_traceback(result)
        assert result.returncode == 3, (args, result.stderr)
        assert "zombie" not in result.stderr, (args, result.stderr)
        assert "being completed" in result.stderr, (args, result.stderr)
    assert corral.json("show", "landing")["task"]["status"] == "zombie"  # the stored code is unchanged


# -- the demo -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_demo_accepts_and_leaves_the_repository_where_it_says(corral, tmp_path: Path) -> None:
    where = tmp_path / "try-it"
    result = corral("demo", "--dir", str(where), "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    doc = result.json()
    lines = [e["line"] for e in doc["events"]]
    assert "$ corral accept greet" in lines
    assert any("merging → complete" in line for line in lines)
    assert doc["repository"] == str(where / "repo")
    said = next(line for line in lines if line.startswith("The scratch repository stays at "))
    assert said.endswith(f"{where / 'repo'}; look around with:")
    repo = Path(doc["repository"])
    assert (repo / "greet.py").is_file() and (repo / "test_greet.py").is_file()  # accepted onto main
    assert git(repo, "branch", "--show-current") == "main"
    shown = corral.json("show", "greet", cwd=repo, env={"CORRAL_HOME": doc["home"]})
    assert shown["task"]["status"] == "complete"
    assert corral("demo", "--dir", str(where)).returncode == 2  # never over an existing directory
    clean = tmp_path / "clean"
    assert corral("demo", "--dir", str(clean), "--clean", timeout=120).returncode == 0
    assert not clean.exists()
    assert os.path.isdir(where)
