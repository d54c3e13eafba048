"""Trusted runs with the real Pi: a confined turn's intents and dispositions, through corral's Pi extension.

corral launches Pi in its bubblewrap sandbox with its extension (``pi -e <corral's package>/pi_extension/
corral_tools.ts``, Pi's own discovery off) and the daemon's MCP endpoint; the model (a scripted loopback
server) calls ``bash`` (the extension's: Pi's built-in is not offered) and ``failure_disposition``.
The tests read what corral recorded: the incidents of the session (``corral failures --history``),
what ran, and what the model was offered.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from corral.pi_extension import DOOR, EXTENSION
from tests.conftest import CLI, git
from tests.support.model_server import ScriptedServer, Text, ToolUse
from tests.support.pi import KEY_VARIABLE, MODEL, PROVIDER, TEST_API_KEY, pi_bin_or_skip, write_user_provider

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

_FOREIGN = ("ANTHROPIC_", "PI_", "OPENAI_", "GEMINI_", "GOOGLE_", "OPENROUTER_")


def bash(command: str, **intent: Any) -> ToolUse:
    return ToolUse("bash", {"command": command, **intent})


@dataclass
class Rig:
    repo: Path
    corral: CLI
    server: ScriptedServer
    env: dict[str, str]

    def create(self, ref: str) -> str:
        self.corral.ok(
            "create", f"Build {ref}", "--ref", ref, "--harness", "pi", "--model", f"{PROVIDER}/{MODEL}", env=self.env
        )
        return ref

    def run(self, ref: str) -> dict[str, Any]:
        waited = self.corral("start", ref, "--wait", "--timeout", "150", env=self.env, timeout=200)
        shown: dict[str, Any] = self.corral.json("show", ref, env=self.env)
        assert shown["task"]["status"] == "blocked", (waited.stderr, shown.get("stopped_because"), self.logs(ref))
        return shown

    def logs(self, ref: str) -> str:
        return self.corral("logs", ref, env=self.env).stdout[-4000:]

    def incidents(self, ref: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.corral.json("failures", ref, "--history", "--raw", env=self.env)["failures"][
            "rows"
        ]
        return rows

    def result(self, i: int) -> dict[str, Any]:
        """The tool result the model got in request ``i``: corral's JSON (an error's too), and whether it failed."""
        found = self.server.script_requests[i].tool_results()[-1]  # the history's newest
        content = found.get("content")
        text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content or [])
        doc, _end = json.JSONDecoder().raw_decode(text)
        return {"is_error": bool(found.get("is_error")), "doc": doc}

    def offered(self, i: int = 0) -> dict[str, dict[str, Any]]:
        """The tools the model was offered in request ``i``, by name."""
        return {t["name"]: t for t in self.server.script_requests[i].body.get("tools", [])}


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    pi = pi_bin_or_skip()
    server = ScriptedServer([])
    agent_dir = write_user_provider(tmp_path / "pi-agent", server)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# demo\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "initial")
    for key in [k for k in os.environ if k.startswith(_FOREIGN)]:
        monkeypatch.delenv(key)
    env = {
        "PI_CODING_AGENT_DIR": str(agent_dir),
        "PI_OFFLINE": "1",
        "PI_TELEMETRY": "0",
        KEY_VARIABLE: TEST_API_KEY,
        "CORRAL_PI_BIN": str(pi),
        "CORRAL_SANDBOX": "bwrap",
        "CORRAL_AGENT_TOOLS": "1",
        "CORRAL_AUTO_RESUME": "0",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    made = Rig(repo, CLI(repo), server, env)
    yield made
    made.corral("daemon", "stop", env=env)
    server.close()


def test_a_confined_pi_turn_has_corrals_shell_with_intents_and_dispositions(rig: Rig) -> None:
    rig.server.steps.extend(
        [
            bash("exit 3", operationId="build"),  # 1: fails
            bash("true --fast-flag-changed", operationId="build"),  # 2: passes under the same operation
            bash("grep -q needle README.md", expectedExitCodes=[1]),  # 3: a declared no-match
            bash("touch first-run", attemptId="a1"),  # 4: runs
            bash("touch second-run", attemptId="a1"),  # 5: a reused attemptId: never runs
            bash("exit 4", operationId="lint"),  # 6: fails
            ToolUse("failure_disposition", {"disposition": "superseded", "targets": ["lint"], "reason": "x"}),
            bash("true", attemptId="after-lint"),  # 8: a later success: evidence
            ToolUse(
                "failure_disposition",
                {"disposition": "superseded", "targets": ["lint"], "reason": "fixed", "evidence": "after-lint"},
            ),
            Text("Done."),
        ]
    )
    ref = rig.create("build")
    shown = rig.run(ref)
    assert shown["sandbox"]["mode"] == "bwrap" and shown["agent_tools"]["mcp"] is True, shown["agent_tools"]
    assert shown["failure_rule"] == {"rule": "intents", "why": None}
    # The built-in bash is not offered: the model's `bash` is corral's (its intents), beside the other tools.
    offered = rig.offered()
    assert set(offered) == {"read", "edit", "write", "bash", "failure_disposition"}, sorted(offered)
    assert {"operationId", "attemptId", "expectedExitCodes"} <= set(offered["bash"]["input_schema"]["properties"])
    results = [rig.result(i) for i in range(1, 10)]
    assert results[0]["doc"]["exit_code"] == 3 and results[0]["is_error"]
    assert results[1]["doc"]["exit_code"] == 0 and not results[1]["is_error"]
    assert results[2]["doc"]["exit_code"] == 1 and results[2]["doc"]["expected"] is True and not results[2]["is_error"]
    assert results[4]["is_error"] and results[4]["doc"]["error"]["code"] == "intent-rejected"
    assert results[6]["is_error"] and results[6]["doc"]["error"]["code"] == "disposition-refused"
    hint = results[6]["doc"]["error"]["hint"]
    lint_call = rig.server.script_requests[6].tool_results()[-1]["tool_use_id"]
    assert hint.startswith("Open incidents:") and lint_call in hint, hint  # the open ones listed, lint's among them
    assert results[8]["doc"]["recorded"] is True, results[8]
    worktree = Path(shown["task"]["worktree"])
    assert (worktree / "first-run").exists() and not (worktree / "second-run").exists()
    by_op = {row["operation"]: row["label"] for row in rig.incidents(ref)}
    assert by_op["op:build"] == "Recovered", by_op
    assert by_op["op:lint"] == "Superseded", by_op
    assert "Expected failure" in by_op.values(), by_op
    assert rig.corral.json("failures", ref, env=rig.env)["failures"]["rows"] == []  # nothing needs action


def test_the_same_calls_in_an_unconfined_pi_turn_change_nothing(rig: Rig) -> None:
    rig.env["CORRAL_SANDBOX"] = "off"
    rig.server.steps.extend(
        [
            bash("exit 3", operationId="build"),  # fails
            bash("true --fast-flag-changed", operationId="build"),  # not an exact retry: recovers nothing
            bash("grep -q needle README.md", expectedExitCodes=[1]),  # an unexpected failure all the same
            ToolUse("failure_disposition", {"disposition": "expected", "targets": ["build"], "reason": "y"}),
            Text("Done."),
        ]
    )
    ref = rig.create("loose")
    shown = rig.run(ref)
    assert shown["sandbox"]["mode"] == "off"
    assert shown["failure_rule"] == {"rule": "exact", "why": "the agent ran unconfined"}
    # Pi's own bash (no intents in its schema), and corral's disposition tool, which records nothing.
    offered = rig.offered()
    assert "failure_disposition" in offered and "operationId" not in json.dumps(offered["bash"])
    disposition = rig.result(4)
    assert disposition["doc"]["recorded"] is False and disposition["doc"]["ignored"] is True
    # The exit 3 and the grep stay failures: the changed retry under its operationId recovers nothing, the
    # declared exit code makes nothing expected, and the disposition is not recorded.
    rows = rig.incidents(ref)
    assert [(r["summary"], r["label"], r["closed_by"], r["disposition"]) for r in rows] == [
        ("bash failed: (no output) Command exited with code 3", "Unclassified failure observation", None, None),
        ("bash failed: (no output) Command exited with code 1", "Unclassified failure observation", None, None),
    ], rows


def test_the_extension_cannot_be_changed_from_inside_the_turn_and_no_other_is_loaded(rig: Rig) -> None:
    before = {p: p.read_bytes() for p in (EXTENSION, DOOR)}
    # An extension of the repository's own (Pi would discover it there): never loaded for corral's turn.
    marker = rig.repo.parent / "loaded"
    local = rig.repo / ".pi" / "extensions" / "evil.ts"
    local.parent.mkdir(parents=True)
    local.write_text(
        f'import {{ writeFileSync }} from "node:fs";\nwriteFileSync({json.dumps(str(marker))}, "x");\n'
        'export default function (pi: any) { pi.registerTool({ name: "evil", label: "evil", description: "x", '
        'parameters: { type: "object" }, async execute() { return { content: [] }; } }); }\n'
    )
    git(rig.repo, "add", ".pi")
    git(rig.repo, "commit", "-q", "-m", "an extension of the repository's")
    rig.server.steps.extend(
        [
            bash(f"echo 'export default () => {{}}' > {EXTENSION}"),
            bash(f"chmod u+w {DOOR}; echo 'throw 1' >> {DOOR}"),
            bash(f"rm -f {EXTENSION}"),
            ToolUse("write", {"path": str(DOOR), "content": "export {};\n"}),  # Pi's own tool, in Pi's process
            Text("Done."),
        ]
    )
    ref = rig.create("tamper")
    rig.run(ref)
    for i in (1, 2, 3):
        result = rig.result(i)
        assert result["is_error"] and result["doc"]["exit_code"] != 0, result
        assert "Read-only file system" in result["doc"]["stderr"], result
    [written] = rig.server.script_requests[4].tool_results()[-1:]
    assert written.get("is_error") and "read-only file system" in json.dumps(written["content"]).lower(), written
    assert {p: p.read_bytes() for p in (EXTENSION, DOOR)} == before
    assert "evil" not in rig.offered() and not marker.exists()


def test_the_persons_own_extensions_load_by_path_from_a_hidden_home(rig: Rig) -> None:
    # pi_extensions (the person's, user-only): loaded by path beside corral's, readable in the sandbox
    # though the home holding it is hidden there, and read-only.
    own = Path(os.environ["HOME"]) / "pi-own" / "mine.ts"
    own.parent.mkdir(parents=True)
    own.write_text(
        "export default function (pi: any) {\n"
        '  pi.on("before_agent_start", async (event: any) =>\n'
        '    ({ systemPrompt: event.systemPrompt + "\\nOWN-LOADED" }));\n'
        "}\n"
    )
    rig.env["CORRAL_PI_EXTENSIONS"] = str(own)
    before = own.read_bytes()
    rig.server.steps.extend([ToolUse("write", {"path": str(own), "content": "export {};\n"}), Text("Done.")])
    ref = rig.create("own")
    rig.run(ref)
    assert "OWN-LOADED" in json.dumps(rig.server.script_requests[0].body.get("system"))
    assert "bash" in rig.offered() and "operationId" in json.dumps(rig.offered()["bash"])  # corral's still
    [written] = rig.server.script_requests[1].tool_results()[-1:]
    assert written.get("is_error") and "read-only file system" in json.dumps(written["content"]).lower(), written
    assert own.read_bytes() == before


def test_a_confined_pi_turn_without_corrals_endpoint_keeps_the_exact_rule(rig: Rig) -> None:
    # corral's tools off: Pi's own bash (the same name as corral's), whose arguments are no intent
    rig.env["CORRAL_AGENT_TOOLS"] = "0"
    rig.server.steps.extend(
        [
            bash("exit 3", operationId="build"),  # fails
            bash("true --fast-flag-changed", operationId="build"),  # no intent: recovers nothing
            bash("touch ran", attemptId="not a valid id!"),  # Pi's own shell runs it: no rejected intent
            Text("Done."),
        ]
    )
    ref = rig.create("plain")
    shown = rig.run(ref)
    assert shown["sandbox"]["mode"] == "bwrap" and shown["agent_tools"]["mcp"] is False
    assert shown["failure_rule"]["rule"] == "exact", shown["failure_rule"]
    assert "operationId" not in json.dumps(rig.offered()["bash"]) and "failure_disposition" not in rig.offered()
    assert (Path(shown["task"]["worktree"]) / "ran").exists()
    rows = rig.incidents(ref)
    assert [(r["summary"], r["label"], r["closed_by"]) for r in rows] == [
        ("bash failed: (no output) Command exited with code 3", "Unclassified failure observation", None)
    ], rows
