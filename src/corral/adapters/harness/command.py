"""Any command as a harness: ``<command…> <prompt>``; each output line is the agent speaking.

Success is exit 0, and the last lines of output are the turn's result. A command
has no session to resume and no read-only mode.
"""

from __future__ import annotations

import shlex

from corral.adapters.harness.base import AttemptFacts, Event, Launch, TurnRequest, Verdict, prompt_arg
from corral.adapters.harness.claude import code_for
from corral.domain.failures import FailureClass, classify_common


class CommandHarness:
    name = "command"
    display = "The command"
    install_hint = 'Set the command to run: corral config (command = "my-agent --flag").'

    def __init__(self, command: str = "") -> None:
        self.argv0 = shlex.split(command) if command else []
        self.executable = self.argv0[0] if self.argv0 else ""

    def work(self, req: TurnRequest) -> Launch:
        prompt, stdin = prompt_arg(req.prompt)
        return Launch([*self.argv0, *prompt], {"CORRAL_PROMPT_ON_STDIN": "1"} if stdin else {}, stdin)

    ask = work
    interactive = work

    def parse(self, line: bytes) -> list[Event]:
        text = line.decode("utf-8", "replace").rstrip("\n")
        return [Event("text", text=text)] if text.strip() else [Event("keepalive")]

    def classify(self, facts: AttemptFacts) -> Verdict:
        if facts.spawn_error:
            return Verdict(False, FailureClass.FATAL_CONFIG, "harness-missing", facts.spawn_error)
        texts = [e.text for e in facts.events if e.kind == "text" and e.text]
        if facts.exit_code == 0 and facts.signal is None:
            return Verdict.ok("\n".join(texts[-20:]))
        cls = classify_common(facts.stderr_tail, facts.exit_code)
        reason = (
            facts.stderr_tail.strip().splitlines()[-1]
            if facts.stderr_tail.strip()
            else (f"exited with code {facts.exit_code}")
        )
        return Verdict(False, cls, code_for(cls) if cls is not FailureClass.UNKNOWN else "harness-exited", reason)
