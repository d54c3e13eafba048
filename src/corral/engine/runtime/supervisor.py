"""The per-turn supervisor: a detached process that owns the agent and writes the receipt.

Run as ``python -m corral.engine.runtime.supervisor <protocol dir>``, in its own session
and process group, so it outlives the CLI that started it. It composes one part per job:
the status reporter (``status.json`` and its heartbeat), the upstream merge
(:mod:`~corral.engine.runtime.upstream`), the work phase (attempts, the retry ladder and the
watchdog), the post-turn check, the git facts and the receipt. It writes files only —
never the database: the reconciler turns the receipt into the turn, its attempts and the
status change. It holds no defaults of its own: every setting arrives in the typed command,
and every wait it makes is the command's ``delays`` (``corral.domain.delays``).

Every text it takes from the harness (the result, reasons, tails) is masked here, at capture,
with this process's secrets (the values of its secret-named environment variables, which a
later reconciler may not have), and bounded; :func:`~corral.engine.runtime.receipt_fit.fit`
keeps the whole receipt within the protocol's bound, so the write never fails for size.
Only ``output.log`` keeps the agent's output verbatim (0600).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from msgspec.structs import replace

from corral import crashpoints
from corral.adapters import tip_files
from corral.adapters.git import Git
from corral.adapters.harness import make_harness
from corral.adapters.harness.base import Harness
from corral.adapters.pid_identity import start_ticks
from corral.domain import prompts
from corral.domain.clock import rfc3339
from corral.domain.redact import bounded, redact, secret_values
from corral.engine.paths import usage_limits_file
from corral.engine.private_state import make_private_dir
from corral.engine.runtime import branch_check, ref_guard, ref_snapshot
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.attempts import AttemptRunner
from corral.engine.runtime.gitfacts import GitProbe
from corral.engine.runtime.heartbeat import StatusReporter, now
from corral.engine.runtime.ladder import WorkOutcome, WorkPhase
from corral.engine.runtime.observer import TurnObserver
from corral.engine.runtime.stopping import StopFlag, Stopped
from corral.engine.runtime.upstream import merge_upstream
from corral.engine.runtime.usage_pause import UsagePauses
from corral.engine.runtime.wire import SPARE_ARG
from corral.errors import UsageError

STACK_BYTES = 8000


class Supervisor:
    """One turn: sync → work → check → receipt, each part doing its one job."""

    def __init__(
        self,
        protocol_dir: Path,
        command: proto.Command,
        *,
        git: Git | None = None,
        sleep: Callable[[float], bool] | None = None,
        ladder_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dir = protocol_dir
        self.command = command
        self.worktree = Path(command.worktree)
        self.log_dir = Path(command.log_dir)
        self.harness: Harness = make_harness(command.harness, command.harness_settings.as_mapping())
        self.secrets = secret_values(os.environ)
        self.probe = GitProbe(git or Git(), self.worktree)
        self.status = StatusReporter(protocol_dir, command.command_id, command.kind, command.delays.heartbeat_interval)
        self.stop = StopFlag(protocol_dir, sleep)
        self.runner = AttemptRunner(
            self.harness,
            worktree=self.worktree,
            log_dir=self.log_dir,
            command_id=command.command_id,
            secrets=self.secrets,
            status=self.status,
            stop=self.stop,
            term_grace=command.watchdog.term_grace_seconds,
            clock=ladder_clock,
            sandbox=command.sandbox,
            read_only=command.posture.read_only,
            delays=command.delays,
        )
        self.runner.session_id = command.resume_id
        self.runner.on_spawned = load_turn_end
        self.work = WorkPhase(
            command,
            self.harness,
            self.runner,
            self.probe,
            self.status,
            self.stop,
            self.secrets,
            ladder_clock,
            self._output_tail,
            pauses=UsagePauses(
                Path(command.usage_limits) if command.usage_limits else usage_limits_file(),
                pid_start=start_ticks(os.getpid()),
            ),
        )
        self.sync: proto.SyncReport | None = None
        self._refs: ref_guard.RefGuard | None = None
        self.observer: TurnObserver | None = None
        if command.journal_dir:
            self.observer = TurnObserver(
                Path(command.journal_dir),
                self.log_dir,
                self.harness,
                command.worktree,
                command.sequence,
                self.secrets,
                exchange=command.exchange,
            )
            self.runner.observe = self.observer.scan
            self.work.observe = self.observer.attempt

    def on_sigterm(self, signum: int, frame: object) -> None:
        self.stop.on_sigterm(signum, frame)

    def run(self) -> proto.Receipt:
        self.status.start()
        crashpoints.hit("supervisor.started")
        try:
            result = self._run()
        except Stopped:
            result = self._receipt(proto.ReceiptStatus.STOPPED, stopped_by=self.stop.by or "system")
        except Exception as exc:  # an internal fault: explained, never silent
            import traceback  # only a fault pays for it

            result = self._receipt(
                proto.ReceiptStatus.ERROR,
                error=proto.TurnError(
                    kind=proto.ErrorKind.INTERNAL,
                    phase=self.status.phase,
                    reason=redact(f"internal fault: {type(exc).__name__}: {exc}"[:STACK_BYTES], self.secrets),
                    tail=redact(bounded(traceback.format_exc(), STACK_BYTES), self.secrets),
                ),
            )
        if self._refs is None:  # after any ending: objects, the branch, other refs
            from corral.engine.runtime import ref_restore

            self._refs = ref_restore.for_command(self.probe.git, self.command)
        result = replace(result, refs=self._refs)
        result = self._with_windows(result)
        self.finish(result)
        return result

    def finish(self, result: proto.Receipt) -> None:
        from corral.engine.runtime import receipt, receipt_fit

        if self.observer is not None:
            self.observer.end(result)  # before the receipt: whoever records the turn reads it whole
        self.status.update(phase="response")
        crashpoints.hit("supervisor.before-response")
        try:
            proto.write(self.dir, receipt_fit.fit(result))
        except proto.TooLarge as exc:  # fit leaves nothing this large; should it ever, still a receipt
            why = f"internal fault: the receipt could not be made small enough: {exc}"
            proto.write(self.dir, receipt.internal(result.command_id, result.task_id, result.kind, "response", why))
        crashpoints.hit("supervisor.after-response")
        self.status.finish()

    def _output_tail(self) -> str:
        from corral.engine.runtime import receipt

        return receipt.output_tail(self.log_dir, self.secrets)

    def _receipt(self, status: proto.ReceiptStatus, **fields: object) -> proto.Receipt:
        from corral.engine.runtime import receipt

        c = self.command
        base = proto.Receipt(
            command_id=c.command_id,
            task_id=c.task_id,
            kind=c.kind,
            status=status,
            started_at=self.status.status.started_at,
            ended_at=rfc3339(now()),
            harness_session_id=self.runner.session_id,
            delivered=c.delivered,
            attempts=tuple(receipt.attempt_record(a, self.secrets) for a in self.work.outcome.attempts),
            sync=self.sync,
            reaped=tuple(self.runner.reaped),
        )
        return replace(base, **fields)

    def _sync(self, head: str | None) -> prompts.SyncOutcome:
        c = self.command
        if not c.sync_before_work or not c.target:
            return prompts.SyncOutcome("none", c.target)
        self.status.update(phase="sync")
        if head is not None and tip_files.reaches(self.probe.git, self.worktree, f"refs/heads/{c.target}", head):
            # Nothing upstream to bring (the usual resume): one look down the branch's commits (their loose files
            # where they are plain, else git's commit graph), not a scan of the worktree
            # (the merge's dirty check) and a merge that would say "Already up to date". A dirty worktree with
            # nothing to merge is up to date too: there is nothing the agent must commit first.
            return prompts.SyncOutcome("up-to-date", c.target)
        return merge_upstream(self.probe.git, self.worktree, c.target)

    def _run(self) -> proto.Receipt:
        c = self.command
        make_private_dir(self.log_dir)
        start: branch_check.Start | None = None
        if not c.posture.read_only and c.sync_before_work and c.target:  # the merge commits through HEAD
            start = branch_check.on_branch(self.probe.git, self.worktree, self.worktree, c.branch, c.task_ref)
        elif not c.posture.read_only:  # the same facts, for begin: nothing commits through HEAD first
            start = branch_check.read_start(self.probe.git, self.worktree, c.task_ref, c.branch)
        if start is not None:  # HEAD names the branch, a plain ref to a commit: HEAD is that commit
            ref_snapshot.known_hooks(self.worktree, c.command_id, start.hooks)
            pre_sync: str | None = start.tip
        else:
            pre_sync = self.probe.head()
        outcome = self._sync(pre_sync)
        self.sync = proto.SyncReport(outcome.state, outcome.target, outcome.files)
        # Only a merge made moves HEAD (a conflict leaves it where it was): HEAD is read again then only,
        # and the work phase's first look at it takes the value read here.
        merged = outcome.state == "merged"
        post_sync = self.probe.head() if merged else pre_sync
        self.probe.known_head(post_sync)
        if not c.posture.read_only:
            known = start if start is not None and not merged else None  # the branch as read: nothing moved it
            branch_check.begin(self.probe.git, self.worktree, c.task_ref, c.branch, known)
        announce = outcome if (c.announce_merge or outcome.state == "conflict") else None
        prompt = prompts.compose(c.prompt_body, announce)
        self.status.update(phase="work")
        work = self.work.run(prompt)
        # What a turn's end needs loads once its agent has run: a turn's start loads only what starts it.
        from corral.engine.runtime import receipt, ref_restore
        from corral.engine.runtime.check import run_check

        fields = self._outcome_fields(work, outcome)
        if fields.get("status", proto.ReceiptStatus.COMPLETED) is proto.ReceiptStatus.COMPLETED:
            fields["result"] = receipt.result_text(work.result_text(), self.secrets)
            fields["usage"] = work.usage()
            if c.kind != "ask" and c.check.command:
                self.status.update(phase="check")
                fields["check"] = run_check(
                    c.check,
                    self.worktree,
                    self.secrets,
                    c.watchdog.term_grace_seconds,
                    confine=self.runner.confine_check,  # it runs the agent's code: where the agent ran
                )
        # What the agent wrote is checked before corral reads it: its objects, its branch, other refs.
        seen: dict[str, str] = {}
        # The index's check reads the turn's one scan of the worktree, which the facts then reuse (the index
        # unchanged since); HEAD is read by that scan, and the branch's tip the check just read answers for it
        # only when the scan finds HEAD at that very commit.
        self._refs = ref_restore.for_command(self.probe.git, self.command, seen, self.probe.staged_against)
        fields["git"] = self.probe.facts(c.git_start_sha, pre_sync, post_sync, c.protected, seen.get("tip"))
        status = fields.pop("status", proto.ReceiptStatus.COMPLETED)
        assert isinstance(status, proto.ReceiptStatus)
        return self._receipt(status, **fields)

    def _with_windows(self, result: proto.Receipt) -> proto.Receipt:
        """A turn that failed, or failed attempts on the way, carries its masked log windows."""
        failed = result.status is not proto.ReceiptStatus.COMPLETED or any(
            a.outcome == "failed" for a in result.attempts
        )
        if not failed:
            return result
        from corral.engine.runtime import receipt

        span = result.attempts[-1].log if result.attempts else None
        output, stderr = receipt.log_windows(self.log_dir, self.secrets, span)
        return replace(result, output_window=output, stderr_window=stderr)

    def _outcome_fields(self, work: WorkOutcome, outcome: prompts.SyncOutcome) -> dict[str, object]:
        if not work.succeeded:
            return {
                "status": work.status,
                "error": work.error,
                "failure_class": work.failure_class,
                "failure_code": work.failure_code,
                "failure_reason": work.failure_reason,
                "failure_attempts": work.failure_attempts,
                "stop_reason": work.stop_reason,
            }
        if outcome.state == "conflict" and self.probe.merge_in_progress():
            return {
                "status": proto.ReceiptStatus.ERROR,
                "error": proto.TurnError(
                    kind=proto.ErrorKind.MERGE_AND_FIX,
                    phase="merge_and_fix",
                    reason="the agent did not finish the upstream merge: "
                    + ", ".join(self.probe.unmerged() or list(outcome.files)),
                ),
            }
        return {"status": proto.ReceiptStatus.COMPLETED}


def _turn_end_modules() -> None:
    from corral.engine.runtime import agent_tokens, receipt, receipt_fit, ref_restore  # noqa: F401
    from corral.engine.runtime.check import run_check  # noqa: F401


def load_turn_end() -> None:
    """What only a turn's end needs (the receipt, its fit, the refs' restore, the check), loaded beside the
    running agent: neither on the way to its start nor, at a crash, on the way to the receipt."""
    import threading

    threading.Thread(target=_turn_end_modules, name="load-turn-end", daemon=True).start()


def warm() -> None:
    """What a turn loads, loaded by a spare before it has a command: its harness (every one corral knows),
    the quarantine, the process container's ``ctypes``, and the turn's end."""
    import ctypes  # noqa: F401

    from corral.adapters.harness import claude, codex, command, pi  # noqa: F401
    from corral.engine.runtime import quarantine  # noqa: F401

    _turn_end_modules()


def await_command() -> list[str] | None:
    """A spare's wait for its command: one line on its pipe naming the protocol directory, the project's
    supervisor log (its output goes there from now, as a spawned supervisor's does) and the turn's token for
    corral's tools (into this process's environment, where the ladder reads it, as a spawned one has it);
    None at end-of-file (its daemon ended, or let it go): it exits without a turn."""
    import json

    line = sys.stdin.buffer.readline()
    if not line.strip():
        return None
    order = json.loads(line)
    quiet = os.open(os.devnull, os.O_RDONLY)
    os.dup2(quiet, 0)
    os.close(quiet)
    if order.get("log"):
        from corral.adapters.files import open_private

        out = open_private(Path(order["log"]))
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
    from corral.domain.agent_tools import TOKEN_ENV

    if order.get("token"):
        os.environ[TOKEN_ENV] = order["token"]
    else:  # a turn without corral's tools: no token its daemon's environment held reaches its agent
        os.environ.pop(TOKEN_ENV, None)
    crashpoints.hit("supervisor.spare-handed")
    return [str(order["protocol_dir"])]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == [SPARE_ARG]:  # started ahead (corral.engine.operations.spares): its command comes on its pipe
        warm()
        handed = await_command()
        if handed is None:
            return 0
        args = handed
    if len(args) != 1:
        print("usage: python -m corral.engine.runtime.supervisor PROTOCOL_DIR", file=sys.stderr)
        return 2
    protocol_dir = Path(args[0])
    found = proto.read(protocol_dir / proto.COMMAND, proto.Command)
    if isinstance(found, proto.Unreadable):
        why = f"command.json could not be read ({found.problem.value}{': ' + found.detail if found.detail else ''})"
        # No command id: nothing can claim this receipt; the reconciler finds the turn lost instead.
        from corral.engine.runtime import receipt

        proto.write(protocol_dir, receipt.internal(None, None, "work", "command", why))
        return 1
    command = found
    secrets = secret_values(os.environ)
    try:
        sup = Supervisor(protocol_dir, command)
    except UsageError as exc:  # a refused start (a harness corral does not know): the turn's first attempt
        from corral.engine.runtime import receipt

        proto.write(protocol_dir, receipt.refused(command, None, redact(exc.message, secrets)[:500]))
        return 1
    except Exception as exc:  # an internal fault before the run: explained, never silent
        import traceback

        from corral.engine.runtime import receipt

        proto.write(
            protocol_dir,
            receipt.internal(
                command.command_id,
                command.task_id,
                command.kind,
                "command",
                redact(f"internal fault: {type(exc).__name__}: {exc}"[:STACK_BYTES], secrets)[:500],
                redact(bounded(traceback.format_exc(), STACK_BYTES), secrets),
            ),
        )
        return 1
    signal.signal(signal.SIGTERM, sup.on_sigterm)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sup.run()
    finally:  # the turn is over: its agent's token dies with it (loaded then: the agent starts sooner)
        from corral.engine.runtime import agent_tokens

        agent_tokens.revoke(command.agent_tools.token_file if command.agent_tools else None)
    return 0


if __name__ == "__main__":
    code = main()
    # The receipt is written and the status final: nothing is left for the interpreter's teardown but
    # to free memory, and whoever waits for this process's exit (the daemon's pidfd) waits through it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
