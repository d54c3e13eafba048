"""Codex: ``codex exec --json [-s workspace-write] <prompt>``; ``codex exec resume <id>`` later.

An ask (and a read-only chat) runs in Codex's read-only sandbox, ``-s read-only``.

Its JSON lines: ``thread.started`` (``thread_id``), ``turn.started``,
``item.started`` / ``item.completed`` (``command_execution`` with ``exit_code``,
``agent_message`` with ``text``, ``error`` with ``message``), ``turn.completed``
(usage) and ``turn.failed`` (``error.message``).
"""

from __future__ import annotations

import re

from corral.adapters.harness.base import AttemptFacts, Event, Launch, TurnRequest, Verdict, json_line, obj, prompt_arg
from corral.adapters.harness.claude import code_for
from corral.domain.failures import FailureClass, classify_common


class CodexHarness:
    name = "codex"
    display = "Codex"
    install_hint = "Install Codex: npm install -g @openai/codex (or set codex_bin)."

    def __init__(self, executable: str = "codex", extra: tuple[str, ...] = ()) -> None:
        self.executable = executable
        self.extra = extra

    def _argv(self, req: TurnRequest, sandbox: str) -> Launch:
        prompt, stdin = prompt_arg(req.prompt)
        # exec's options go before `resume`: the resume subcommand takes no -s of its own.
        argv = [self.executable, "exec", "--json", "-s", sandbox, "--skip-git-repo-check", *self.extra]
        if req.model:
            argv += ["-m", req.model]
        if req.resume_id:
            argv += ["resume", req.resume_id]
        argv += prompt if prompt else ["-"]
        return Launch(argv, {}, stdin)

    def work(self, req: TurnRequest) -> Launch:
        return self._argv(req, "read-only" if req.posture.read_only else "workspace-write")

    def ask(self, req: TurnRequest) -> Launch:
        return self._argv(req, "read-only")

    def interactive(self, req: TurnRequest) -> Launch:
        argv = [self.executable]
        if req.resume_id:
            argv += ["resume", req.resume_id]
        if req.posture.read_only:
            argv += ["-s", "read-only"]
        return Launch(argv)

    def parse(self, line: bytes) -> list[Event]:
        data = json_line(line)
        if data is None:
            return []
        kind = data.get("type")
        item = obj(data.get("item"))
        if kind == "thread.started" and isinstance(data.get("thread_id"), str):
            return [Event("session", session_id=data["thread_id"])]
        if kind == "item.started" and item.get("type") == "command_execution":
            return [Event("tool_start", tool_id=item.get("id"), name=str(item.get("command", "")))]
        if kind == "item.completed":
            if item.get("type") == "command_execution":
                failed = item.get("status") == "failed" or item.get("exit_code") not in (0, None)
                return [Event("tool_end", tool_id=item.get("id"), is_error=failed)]
            if item.get("type") == "agent_message":
                return [Event("text", text=str(item.get("text", "")))]
            if item.get("type") == "error":
                # An error *item* is a non-fatal warning (e.g. missing model metadata); turn.failed is the failure.
                return [Event("keepalive", text=str(item.get("message", "")))]
            return [Event("keepalive")]
        if kind == "turn.completed":
            usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
            return [Event("result", usage=usage)]
        if kind == "turn.failed":
            error = obj(data.get("error"))
            return [Event("model_error", text=str(error.get("message", "turn failed")))]
        if kind == "error":
            message = str(data.get("message", ""))
            if message.startswith("Reconnecting"):
                return [Event("retry", text=message)]
            return [Event("model_error", text=message)]
        return [Event("keepalive")]

    def classify(self, facts: AttemptFacts) -> Verdict:
        if facts.spawn_error:
            return Verdict(False, FailureClass.FATAL_CONFIG, "harness-missing", facts.spawn_error)
        texts = [e.text for e in facts.events if e.kind == "text" and e.text]
        completed = any(e.kind == "result" for e in facts.events)
        if completed and facts.exit_code == 0:
            return Verdict.ok(texts[-1] if texts else "")
        errors = [e.text or "" for e in facts.events if e.kind == "model_error"]
        text = "\n".join([*errors, facts.stderr_tail])
        reason = (errors[-1] if errors else "") or facts.stderr_tail.strip()[-300:] or "Codex ended without a result"
        cls = classify_common(text, facts.exit_code)
        if cls is FailureClass.UNKNOWN:
            cls = _codex_dialect(text)
        if not errors and cls is FailureClass.UNKNOWN:
            return Verdict(False, cls, "harness-exited", reason)
        return Verdict(False, cls, code_for(cls), reason)


def _codex_dialect(text: str) -> FailureClass:
    """Codex's own wording for failures the shared signals do not catch (seen with 0.171.0)."""
    if re.search(r"experiencing high demand", text, re.I):
        return FailureClass.TRANSIENT_OVERLOAD  # how Codex reports an HTTP 500 from its service
    if re.search(r"stream disconnected before completion", text, re.I):
        return FailureClass.TRANSIENT_NETWORK
    if re.search(r"Missing environment variable", text):
        return FailureClass.FATAL_CONFIG
    if re.search(r"Quota exceeded", text, re.I):
        return FailureClass.FATAL_AUTH
    if re.search(r"Connection failed", text):
        return FailureClass.TRANSIENT_UNREACHABLE
    return FailureClass.UNKNOWN
