"""The safe cause translator and the wording, without processes: allowlists, masks, bounds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from corral.adapters.harness import make_harness
from corral.domain.explain import (
    MAY_HAVE_CHANGED,
    UNKNOWN_REASON,
    attempt_line,
    explain_failure,
    failure_line,
    stopped_because,
)
from corral.domain.records import FailureEvidence, PossibleEffects, RestingCause
from corral.domain.redact import MASK
from corral.engine.paths import ProjectPaths
from corral.engine.read import diagnostic_retention, diagnostics, translator
from corral.engine.read.diagnostic_content import translate_output
from corral.engine.read.translator import Translator

SECRET = "hunter2-but-longer"
CLAUDE = make_harness("claude", {})


def test_details_keep_only_allowlisted_scalar_fields_masked_and_bounded():
    t = Translator([SECRET])
    out = t.details(
        {
            "reason": f"failed with {SECRET} and sk-abcdefghijklmnopqrstuv",
            "prompt": "the user's whole prompt",
            "env": {"HOME": "/root"},
            "files": ["a.py", SECRET, {"nested": 1}],
            "attempts": 3,
            "summary": "x" * 5000,
        }
    )
    assert set(out) == {"reason", "files", "attempts", "summary"}
    assert SECRET not in json.dumps(out) and "sk-abc" not in out["reason"]
    assert out["reason"].count(MASK) == 2
    assert out["files"] == ["a.py", MASK]
    assert len(out["summary"].encode()) <= translator.TEXT_BYTES and out["summary"].endswith("…")


def test_a_tail_is_exact_apart_from_masking_and_never_keeps_half_a_secret():
    t = Translator([SECRET])
    text = "line one\n" + f"token={SECRET}\n" + "last line \x1b[31mred\x1b[0m\n"
    assert t.tail(text, 10_000) == text.replace(f"token={SECRET}", f"token={MASK}")
    long = "a" * 50_000 + SECRET + "\n" + "b" * 100
    tail = t.tail(long, 2_000)
    assert SECRET[4:] not in tail and len(tail.encode()) <= 2_000


def write_log(tmp_path: Path, lines: list[str]) -> Path:
    log_dir = tmp_path / "turn"
    log_dir.mkdir()
    (log_dir / "output.log").write_text("\n".join(lines) + "\n")
    (log_dir / "stderr.log").write_text(f"warning: {SECRET}\n")
    return log_dir


def test_output_is_read_through_the_harness_parser_never_copied_raw(tmp_path):
    events = [
        {"type": "system", "subtype": "init", "session_id": "s", "tools": ["Bash"], "cwd": "/secret/path"},
        {"type": "user", "message": {"role": "user", "content": "THE PROMPT TEXT"}},
        {"type": "assistant", "message": {"content": [{"type": "thinking", "thinking": "PRIVATE REASONING"}]}},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": f"using {SECRET}"}]}},
        {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                       "input": {"command": "cat ~/.netrc"}}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                                  "content": "Permission denied"}]}},
        {"type": "result", "is_error": True, "result": "API Error: 500", "api_error_status": 500},
    ]  # fmt: skip
    log_dir = write_log(tmp_path, [json.dumps(e) for e in events] + ["a plain line the harness printed"])
    out = translate_output(log_dir, CLAUDE, Translator([SECRET]))
    dumped = json.dumps(out.to_json())
    for never in ("THE PROMPT TEXT", "PRIVATE REASONING", "cat ~/.netrc", "/secret/path", SECRET, '"type"'):
        assert never not in dumped, never
    assert out.partial == [
        {"kind": "assistant_text", "text": f"using {MASK}"},
        {"kind": "tool_call", "name": "Bash"},
        {"kind": "tool_error", "text": "Permission denied"},
        {"kind": "result", "is_error": True, "status": 500, "text": "API Error: 500"},
    ]
    assert out.tail == "a plain line the harness printed"
    assert out.stderr_tail == f"warning: {MASK}"
    assert out.protocol_lines == len(events)


def test_a_command_harness_output_tail_stays_exact(tmp_path):
    log_dir = write_log(tmp_path, ["step 1 ok", "  indented output", "FAILED: exit 3"])
    out = translate_output(log_dir, make_harness("command", {"command": "x"}), Translator([]))
    assert out.tail == "step 1 ok\n  indented output\nFAILED: exit 3"


def test_write_is_atomic_private_and_dated_by_the_injected_clock(tmp_path):
    paths = ProjectPaths(repo=tmp_path / "repo", home=tmp_path, root=tmp_path / "state")
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    ref = diagnostics.write(paths, "task1", "cmd/../x", {"kind": "turn-failure"}, when)
    path = paths.diagnostics / ref
    assert ref.startswith("task1/") and ".." not in ref.split("/", 1)[1].replace(".json", "")
    assert path.stat().st_mode & 0o777 == 0o600 and path.stat().st_mtime == when.timestamp()
    assert json.loads(path.read_text())["created_at"] == "2025-01-02T03:04:05.000000Z"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    assert ref in diagnostics.present(paths.diagnostics, "task1")  # what show resolves the reference by
    path.unlink()
    assert ref not in diagnostics.present(paths.diagnostics, "task1")
    assert diagnostic_retention.EXPIRED == "Expired after 90 days"  # how show then reads it


# -- wording ---------------------------------------------------------------------------------------


def evidence(code, **kw):
    return FailureEvidence(source="harness", code=code, **kw)


def test_a_lost_turn_names_the_unknown_half_by_the_phase_it_was_last_seen_in():
    def line(phase, effects=PossibleEffects.UNKNOWN):
        return explain_failure(evidence("turn-lost", phase=phase, possible_effects=effects), "claude", "t").line

    assert "whether the agent finished" in line("work")
    assert "whether that merge finished is unknown" in line("sync")
    assert "the check's result is unknown" in line("check")
    assert "never ran" in line(None, PossibleEffects.NONE)


def test_unknown_codes_narrow_tolerantly_by_category_then_to_unknown_reasons():
    assert explain_failure(None, "claude", "t").line == UNKNOWN_REASON
    assert explain_failure(evidence("x-new"), "claude", "t").line == UNKNOWN_REASON
    assert explain_failure(evidence("x-new", category="unknown"), "claude", "t").line == (
        "Claude Code reported an error. Open the details for the cause."
    )
    assert explain_failure(evidence("harness-weird"), "pi", "t").line == (
        "Pi reported an error. Open the details for the cause."
    )
    assert explain_failure(evidence("x", category="transient_overload"), "codex", "t").line == (
        "Codex was overloaded or rate-limited."
    )


def test_possible_effects_add_the_may_have_changed_line_only_where_something_ran():
    partial = evidence("turn-crashed", possible_effects=PossibleEffects.PARTIAL)
    assert failure_line(partial, "claude", "t").endswith(MAY_HAVE_CHANGED)
    nothing = evidence("turn-crashed", possible_effects=PossibleEffects.NONE)
    assert MAY_HAVE_CHANGED not in failure_line(nothing, "claude", "t")
    missing = evidence("harness-missing", possible_effects=PossibleEffects.UNKNOWN)
    assert MAY_HAVE_CHANGED not in failure_line(missing, "claude", "t")
    cause = RestingCause("turn-crashed", datetime.now(UTC), evidence=partial)
    assert stopped_because(cause).endswith(MAY_HAVE_CHANGED)


def test_attempt_lines():
    assert attempt_line(1, 3, "Claude Code was overloaded or rate-limited.", retried=True) == (
        "Attempt 1 of 3 failed: Claude Code was overloaded or rate-limited. · retrying"
    )
    assert attempt_line(3, 3, "x.", retried=False) == "Attempt 3 of 3 failed: x."
