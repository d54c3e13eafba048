"""Pi (``@mariozechner/pi-coding-agent``): ``pi -p --mode json … <prompt>``.

Its JSON lines (docs/architecture.md#harnesses): ``session`` (``id``),
``message_end`` (an assistant message with ``stopReason: "error"`` and
``errorMessage`` is a model failure), ``tool_execution_start`` / ``_end``
(``isError``), ``auto_retry_start`` / ``auto_retry_end`` (``success``,
``finalError``). Pi exits 0 even when every model call failed, so an attempt is
judged by its events, never by the exit code alone.

An ask (and a read-only chat) gets Pi's read-only tool set, ``--tools read,grep,find,ls``
(its ``--help``: "Read-only mode (no file modifications possible)"); corral's before/after
comparison stands behind it (``corral.engine.readonly``).
"""

from __future__ import annotations

from typing import Any

from corral.adapters.harness.base import AttemptFacts, Event, Launch, TurnRequest, Verdict, json_line, obj, prompt_arg
from corral.adapters.harness.claude import code_for
from corral.domain.failures import FailureClass, classify_common

#: Pi's read-only tool set: no bash, edit or write tool is enabled.
READ_ONLY_TOOLS = "read,grep,find,ls"


def _assistant_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


class PiHarness:
    name = "pi"
    display = "Pi"
    corral_owns_retries = False  # Pi retries on its own (auto_retry_start events): shown live, not ended
    install_hint = "Install Pi: npm install -g @mariozechner/pi-coding-agent (or set pi_bin)."

    def __init__(self, executable: str = "pi", provider: str | None = None) -> None:
        self.executable = executable
        self.provider = provider

    def _argv(self, req: TurnRequest, *, read_only: bool = False) -> tuple[list[str], bytes | None]:
        prompt, stdin = prompt_arg(req.prompt)
        argv = [self.executable, "-p", "--mode", "json"]
        if read_only:
            argv += ["--tools", READ_ONLY_TOOLS]
        provider, model = self.provider, req.model
        if model and "/" in model and not provider:
            provider, model = model.split("/", 1)
        if provider:
            argv += ["--provider", provider]
        if model:
            argv += ["--model", model]
        if req.resume_id:
            argv += ["--session", req.resume_id]
        if req.system:
            argv += ["--append-system-prompt", req.system]
        argv += ["--no-extensions", *prompt]
        return argv, stdin

    def work(self, req: TurnRequest) -> Launch:
        argv, stdin = self._argv(req, read_only=req.posture.read_only)
        return Launch(argv, {}, stdin)

    def ask(self, req: TurnRequest) -> Launch:
        argv, stdin = self._argv(req, read_only=True)
        return Launch(argv, {}, stdin)

    def interactive(self, req: TurnRequest) -> Launch:
        argv = [self.executable]
        if req.resume_id:
            argv += ["--session", req.resume_id]
        if req.posture.read_only:
            argv += ["--tools", READ_ONLY_TOOLS]
        return Launch(argv)

    def parse(self, line: bytes) -> list[Event]:
        data = json_line(line)
        if data is None:
            return []
        kind = data.get("type")
        if kind == "session" and isinstance(data.get("id"), str):
            return [Event("session", session_id=data["id"])]
        if kind == "message_end":
            message = obj(data.get("message"))
            if message.get("role") != "assistant":
                return [Event("keepalive")]
            if message.get("stopReason") == "error" or isinstance(message.get("errorMessage"), str):
                return [Event("model_error", text=str(message.get("errorMessage") or "model call failed"))]
            usage = obj(message.get("usage")) or None
            text = _assistant_text(message)
            events = [Event("text", text=text)] if text else []
            if message.get("stopReason") in ("stop", "end_turn", "endTurn"):
                events.append(Event("result", text=text, usage=usage))
            elif usage:
                events.append(Event("usage", usage=usage))
            return events or [Event("keepalive")]
        if kind == "tool_execution_start":
            return [Event("tool_start", tool_id=data.get("toolCallId"), name=data.get("toolName"))]
        if kind == "tool_execution_end":
            return [Event("tool_end", tool_id=data.get("toolCallId"), is_error=data.get("isError") is True)]
        if kind == "auto_retry_start":
            return [Event("retry", text=str(data.get("errorMessage") or ""))]
        if kind == "auto_retry_end" and data.get("success") is False:
            return [Event("model_error", text=str(data.get("finalError") or "model retry exhausted"))]
        return [Event("keepalive")]

    def classify(self, facts: AttemptFacts) -> Verdict:
        if facts.spawn_error:
            return Verdict(False, FailureClass.FATAL_CONFIG, "harness-missing", facts.spawn_error)
        # The outcome is the last word: a model error after the final result, or no result at all, fails.
        last = None
        for event in facts.events:
            if event.kind in ("result", "model_error"):
                last = event
        if last is not None and last.kind == "result" and facts.signal is None:
            return Verdict.ok(last.text)
        text = "\n".join([last.text or "" if last else "", facts.stderr_tail])
        reason = (last.text if last else None) or facts.stderr_tail.strip()[-300:] or "Pi ended without a result"
        cls = classify_common(text, facts.exit_code)
        if cls is FailureClass.UNKNOWN and "Connection error" in text:
            cls = FailureClass.TRANSIENT_UNREACHABLE  # Pi's word for a server it cannot reach
        if last is None and cls is FailureClass.UNKNOWN:
            return Verdict(False, cls, "harness-exited", reason)
        return Verdict(False, cls, code_for(cls), reason)
