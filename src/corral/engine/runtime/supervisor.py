"""The per-turn supervisor: a detached process that owns the agent and writes the receipt.

Run as ``python -m corral.engine.runtime.supervisor <protocol dir>``, in its own session
and process group, so it outlives the CLI that started it. Phases: reading the
command → sync (merge upstream) → work (attempts, retry ladder, watchdog) →
post-turn check → writing the response. It writes files only — ``status.json`` as
it goes (with a heartbeat), the harness's output verbatim to the turn's
``output.log``, and finally ``response.json`` — never the database: the reconciler
turns the receipt into the turn, its attempts and the status change.
"""

from __future__ import annotations

import fnmatch
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from corral import crashpoints
from corral.adapters.git import Git
from corral.adapters.harness import make_harness
from corral.adapters.harness.base import AttemptFacts, Event, Harness, Launch, Posture, TurnRequest, Verdict
from corral.adapters.process import ArgvError, check_argv
from corral.domain import prompts
from corral.domain.clock import rfc3339
from corral.domain.failures import (
    TERM_GRACE_SECONDS,
    Budgets,
    FailureClass,
    Retry,
    decide,
    decide_watchdog_retry,
    exit_reason,
)
from corral.domain.redact import bounded, redact, secret_values
from corral.engine.runtime import protocol as proto
from corral.errors import GitError, UsageError

HEARTBEAT_SECONDS = 2.0
EVENTS_KEPT = 500
TAIL_BYTES = 64 * 1024
CHUNK = 256 * 1024
CHECK_TAIL_LINES = 200
INTERRUPT_TAIL_LINES = 50


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class AttemptRun:
    number: int
    started_at: datetime
    ended_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    # Bounded: classification needs only the last events (the result, the last errors), and a
    # 100 MB stream must not grow the supervisor. Counts and the verbatim log keep the rest.
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    stderr_tail: str = ""
    spawn_error: str | None = None
    spawn_errno: int | None = None
    argv_error: bool = False  # the prompt could not be passed (e.g. a NUL byte): nothing was spawned
    watchdog: bool = False
    stopped: bool = False
    we_signalled: bool = False
    duration: float = 0.0
    log_start: int = 0
    log_end: int = 0
    verdict: Verdict | None = None

    def facts(self) -> AttemptFacts:
        return AttemptFacts(self.exit_code, self.signal, self.events, self.stderr_tail, self.spawn_error)


class Stopped(Exception):
    """A person (or a gate) asked for the turn to end."""


class Supervisor:
    def __init__(
        self,
        protocol_dir: Path,
        command: dict[str, Any],
        *,
        git: Git | None = None,
        sleep: Callable[[float], bool] | None = None,
        ladder_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dir = protocol_dir
        self.cmd = command
        self.git = git or Git()
        self.worktree = Path(command["worktree"])
        self.log_dir = Path(command["log_dir"])
        self.harness: Harness = make_harness(command["harness"], command.get("harness_settings") or {})
        self.secrets = secret_values(os.environ)
        self.phase = "command"
        self.status_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.stopped_by: str | None = None
        self.retry: dict[str, Any] | None = None
        self.attempt_no = 0
        self.agent_pid: int | None = None
        self.agent_pgid: int | None = None
        self.session_id: str | None = command.get("resume_id")
        self.started_at = now()
        # Retry pacing and attempt durations run on this clock; tests pass a virtual one.
        # (The watchdog always measures real time: it guards a real process.)
        self._sleep = sleep
        self.ladder_clock = ladder_clock

    # -- status.json -----------------------------------------------------------------
    def write_status(self) -> None:
        with self.status_lock:
            proto.write_json(
                self.dir / proto.STATUS,
                {
                    "command_id": self.cmd["command_id"],
                    "pid": os.getpid(),
                    "agent_pid": self.agent_pid,
                    "phase": self.phase,
                    "kind": self.cmd["kind"],
                    "attempt": self.attempt_no,
                    "retry": self.retry,
                    "started_at": rfc3339(self.started_at),
                    "heartbeat_at": rfc3339(now()),
                },
                durable=False,
            )

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.write_status()

    def heartbeat(self) -> None:
        while not self.done.wait(HEARTBEAT_SECONDS):
            try:
                self.write_status()
            except OSError:
                pass  # a missed beat is not a failure; the next one may land

    # -- stop ------------------------------------------------------------------------
    def on_sigterm(self, _signum: int, _frame: Any) -> None:
        request = proto.read(self.dir / proto.STOP) or {}
        self.stopped_by = str(request.get("actor") or "system")
        self.stop_event.set()

    def wait(self, seconds: float) -> None:
        """Sleep between attempts; a stop request wakes it."""
        if self._sleep is not None:
            if self._sleep(seconds) or self.stop_event.is_set():
                raise Stopped
            return
        if self.stop_event.wait(seconds):
            raise Stopped

    # -- the run -------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.done = threading.Event()
        self.write_status()
        beat = threading.Thread(target=self.heartbeat, daemon=True)
        beat.start()
        crashpoints.hit("supervisor.started")
        try:
            response = self._run()
        except Stopped:
            response = self.base_response("stopped")
            response["stopped_by"] = self.stopped_by or "system"
        except Exception as exc:  # an internal fault: explained, never silent
            response = self.base_response("error")
            response["error"] = {
                "kind": "internal",
                "phase": self.phase,
                "reason": f"internal fault: {type(exc).__name__}: {exc}",
                "exit_code": None,
                "signal": None,
                "tail": redact(bounded(traceback.format_exc(), 8000), self.secrets),
            }
        response.setdefault("attempts", [self.attempt_json(a) for a in getattr(self, "attempts", [])])
        self.finish(response)
        return response

    def finish(self, response: dict[str, Any]) -> None:
        self.set_phase("response")
        response["ended_at"] = rfc3339(now())
        crashpoints.hit("supervisor.before-response")
        proto.write_json(self.dir / proto.RESPONSE, response)
        crashpoints.hit("supervisor.after-response")
        self.phase = "done"
        self.done.set()
        self.write_status()

    def base_response(self, status: str) -> dict[str, Any]:
        return {
            "command_id": self.cmd["command_id"],
            "task_id": self.cmd["task_id"],
            "kind": self.cmd["kind"],
            "status": status,
            "harness_session_id": self.session_id,
            "started_at": rfc3339(self.started_at),
            "sync": getattr(self, "sync", None),
            "delivered": self.cmd.get("delivered", []),
        }

    def _run(self) -> dict[str, Any]:
        self.attempts: list[AttemptRun] = []
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.pre_sync_head = self.head()
        outcome = self.sync_phase()
        self.sync = {"state": outcome.state, "target": outcome.target, "files": list(outcome.files)}
        self.post_sync_head = self.head()
        body = self.cmd["prompt_body"]
        announce = outcome if (self.cmd.get("announce_merge", True) or outcome.state == "conflict") else None
        prompt = prompts.compose(body, announce)
        self.set_phase("work")
        stop_fields = self.work_phase(prompt)
        response = self.base_response("completed")
        if stop_fields:
            response.update(stop_fields)
        elif outcome.state == "conflict" and self.merge_in_progress():
            response["status"] = "error"
            response["error"] = {
                "kind": "merge_and_fix",
                "phase": "merge_and_fix",
                "reason": "the agent did not finish the upstream merge: "
                + ", ".join(self.unmerged() or list(outcome.files)),
                "exit_code": None,
                "signal": None,
                "tail": "",
            }
        response["attempts"] = [self.attempt_json(a) for a in self.attempts]
        response["harness_session_id"] = self.session_id
        if response["status"] == "completed":
            last = self.attempts[-1].verdict if self.attempts else None
            response["result"] = last.result_text if last else None
            response["usage"] = self.usage()
            check = self.check_phase()
            if check is not None:
                response["check"] = check
        self.describe_git(response)
        return response

    # -- git facts -----------------------------------------------------------------------
    def head(self) -> str | None:
        try:
            return self.git.rev_parse("HEAD", cwd=self.worktree)
        except (GitError, OSError):
            return None

    def merge_in_progress(self) -> bool:
        result = self.git.run("rev-parse", "-q", "--verify", "MERGE_HEAD", cwd=self.worktree, check=False)
        return result.returncode == 0 or bool(self.unmerged())

    def unmerged(self) -> list[str]:
        out = self.git.run("diff", "--name-only", "--diff-filter=U", cwd=self.worktree, check=False).stdout
        return [p for p in out.splitlines() if p]

    def describe_git(self, response: dict[str, Any]) -> None:
        try:
            head = self.head()
            start = self.cmd.get("git_start_sha")
            commits: list[str] = []
            if head and start:
                out = self.git.run("rev-list", "--reverse", f"{start}..{head}", cwd=self.worktree, check=False)
                commits = [c for c in out.stdout.split() if c]
            response["head"] = head
            response["commits"] = commits
            response["check_from"] = start
            changed = self.changed_paths()
            patterns = self.cmd.get("protected") or []
            response["changed_paths"] = changed
            response["protected_changes"] = [p for p in changed if any(fnmatch.fnmatch(p, pat) for pat in patterns)]
            response["dirty"] = bool(self.git.dirty_paths(self.worktree))
        except (GitError, OSError) as exc:
            response["git_error"] = str(exc)

    def changed_paths(self) -> list[str]:
        """What the agent changed: since the last checked commit up to the merge, then since the merge.

        Target changes the merge brought in are never counted as the agent's, and a
        crashed turn's commits are checked by the next one.
        """
        paths: set[str] = set()
        start, pre, post = self.cmd.get("git_start_sha"), self.pre_sync_head, self.post_sync_head
        if start and pre and start != pre:
            out = self.git.run("diff", "--name-only", "--no-renames", start, pre, cwd=self.worktree, check=False)
            paths.update(p for p in out.stdout.splitlines() if p)
        if post:
            out = self.git.run("diff", "--name-only", "--no-renames", post, cwd=self.worktree, check=False)
            paths.update(p for p in out.stdout.splitlines() if p)
        paths.update(self.git.dirty_paths(self.worktree))
        return sorted(paths)

    # -- sync ------------------------------------------------------------------------------
    def sync_phase(self) -> prompts.SyncOutcome:
        target = self.cmd.get("target") or ""
        if not self.cmd.get("sync_before_work") or not target:
            return prompts.SyncOutcome("none", target)
        self.set_phase("sync")
        if self.git.dirty_paths(self.worktree):
            return prompts.SyncOutcome("skipped-dirty", target)
        if self.git.rev_parse(f"refs/heads/{target}", cwd=self.worktree) is None:
            return prompts.SyncOutcome("none", target)
        merge = ["merge", "--no-ff", "--no-edit", "--no-verify", f"refs/heads/{target}"]
        result = self.git.run(*self.git.identity_args(self.worktree), *merge, cwd=self.worktree, check=False)
        if result.returncode == 0:
            up_to_date = "Already up to date" in result.stdout
            return prompts.SyncOutcome("up-to-date" if up_to_date else "merged", target)
        files = self.unmerged()
        if not files:
            # Not a conflict (e.g. a hook or an identity problem): leave the branch as it was.
            self.git.run("merge", "--abort", cwd=self.worktree, check=False)
            raise GitError(f"merging {target} failed: {(result.stderr or result.stdout).strip()[-300:]}")
        return prompts.SyncOutcome("conflict", target, tuple(files))

    # -- work ------------------------------------------------------------------------------
    def request(self, prompt: str) -> TurnRequest:
        posture = self.cmd.get("posture") or {}
        return TurnRequest(
            prompt=prompt,
            cwd=str(self.worktree),
            system=self.cmd.get("system"),
            resume_id=self.session_id,
            model=self.cmd.get("model"),
            posture=Posture(
                permission_mode=posture.get("permission_mode", "acceptEdits"),
                allowed_tools=tuple(posture.get("allowed_tools") or ()),
                read_only=bool(posture.get("read_only")),
                is_sandbox=bool(posture.get("is_sandbox")),
            ),
        )

    def launch(self, prompt: str) -> Launch:
        req = self.request(prompt)
        return self.harness.ask(req) if self.cmd["kind"] == "ask" else self.harness.work(req)

    def work_phase(self, prompt: str) -> dict[str, Any] | None:
        """The attempt loop. Returns response fields for a stop, or None when an attempt succeeded."""
        b = self.cmd.get("budgets") or {}
        budgets = Budgets(
            overload_seconds=float(b.get("overload_seconds", Budgets.overload_seconds)),
            network_seconds=float(b.get("network_seconds", Budgets.network_seconds)),
            unreachable_attempts=int(b.get("unreachable_attempts", Budgets.unreachable_attempts)),
            unknown_attempts=int(b.get("unknown_attempts", Budgets.unknown_attempts)),
        )
        watchdog_timeout = float(self.cmd.get("watchdog_timeout") or 1800.0)
        relaunches = 0
        streak_class: FailureClass | None = None
        streak = 0
        streak_started = self.ladder_clock()
        durations: list[float] = []
        while True:
            if self.stop_event.is_set():
                raise Stopped
            self.attempt_no += 1
            head_before = self.head()
            run = self.run_attempt(prompt, watchdog_timeout)
            self.attempts.append(run)
            if run.stopped:
                raise Stopped
            if run.watchdog:
                captured = self.work_captured(head_before)
                if decide_watchdog_retry(captured, relaunches):
                    relaunches += 1
                    continue
                return self.error_fields(run, "watchdog", self.watchdog_reason(watchdog_timeout, relaunches))
            if not run.we_signalled and (run.signal is not None or killed_by_exit(run)):
                return self.error_fields(run, "crash", exit_reason(run.exit_code, run.signal))
            verdict = run.verdict = self.harness.classify(run.facts())
            if run.argv_error:  # not a missing program: the prompt itself could not be passed
                verdict = run.verdict = Verdict(False, FailureClass.FATAL_CONFIG, "prompt-unrenderable", verdict.reason)
            if verdict.succeeded:
                return None
            failure_class = verdict.failure_class or FailureClass.UNKNOWN
            if failure_class is not streak_class:
                streak_class, streak, streak_started, durations = failure_class, 0, self.ladder_clock(), []
            streak += 1
            durations.append(run.duration)
            decision = decide(failure_class, streak, self.ladder_clock() - streak_started, budgets, durations)
            if isinstance(decision, Retry):
                self.retry = {
                    "attempt": self.attempt_no,
                    "failure_class": failure_class.value,
                    "reason": redact(verdict.reason, self.secrets)[:300],
                    "next_delay_ms": int(decision.delay * 1000),
                }
                self.set_phase("retrying")
                self.wait(decision.delay)
                self.retry = None
                self.set_phase("work")
                continue
            if decision.reason == "crash-loop":
                fields = self.error_fields(run, "crash_loop", f"crash loop: {verdict.reason}")
            else:
                fields = {"status": "failed"}
            fields.update(
                {
                    "failure_class": failure_class.value,
                    "failure_code": "retry-budget-exhausted" if decision.reason == "budget-exhausted" else verdict.code,
                    "failure_reason": redact(verdict.reason, self.secrets)[:2000],
                    "failure_attempts": streak,
                    "stop_reason": decision.reason,
                }
            )
            return fields

    def watchdog_reason(self, timeout: float, relaunches: int) -> str:
        again = (
            f"corral had already relaunched it {relaunches} time{'s' if relaunches != 1 else ''} with no work captured"
            if relaunches
            else "work was captured, so corral did not relaunch it"
        )
        return (
            f"the no-progress watchdog fired: no completed step (a tool result or an assistant message) "
            f"for {int(timeout)} s; keep-alives are not progress; {again}"
        )

    def work_captured(self, head_before: str | None) -> bool:
        try:
            head = self.head()
            return (head is not None and head != head_before) or bool(self.git.dirty_paths(self.worktree))
        except (GitError, OSError):
            return False  # the commit probe could not read git: fail toward retrying

    def error_fields(self, run: AttemptRun, kind: str, reason: str) -> dict[str, Any]:
        return {
            "status": "error",
            "error": {
                "kind": kind,
                "phase": self.phase,
                "reason": reason,
                "exit_code": run.exit_code,
                "signal": run.signal,
                "tail": self.output_tail(),
            },
        }

    def output_tail(self) -> str:
        text = ""
        for name in ("output.log", "stderr.log"):
            path = self.log_dir / name
            try:
                with path.open("rb") as fh:
                    fh.seek(max(0, path.stat().st_size - TAIL_BYTES))
                    text += fh.read().decode("utf-8", "replace")
            except OSError:
                continue
        lines = text.splitlines()[-INTERRUPT_TAIL_LINES:]
        return redact("\n".join(lines), self.secrets)

    def usage(self) -> dict[str, Any] | None:
        for run in reversed(self.attempts):
            for event in reversed(run.events):
                if event.kind == "result" and event.usage:
                    return event.usage
        return None

    # -- one attempt -------------------------------------------------------------------------
    def run_attempt(self, prompt: str, watchdog_timeout: float) -> AttemptRun:
        run = AttemptRun(self.attempt_no, now())
        try:
            launch = self.launch(prompt)
            check_argv(launch.argv)
        except ArgvError as exc:
            run.spawn_error = exc.message
            run.argv_error = True
            run.ended_at = now()
            return run
        env = dict(os.environ)
        env.update(launch.env)
        for var in ("CORRAL_CRASH_AT", "CORRAL_CRASH_HOW"):
            env.pop(var, None)
        # A tag that outlives this process: a reaper finds the agent by it even if the
        # supervisor dies before it could write the agent's pid down.
        env["CORRAL_COMMAND_ID"] = str(self.cmd["command_id"])
        out_path, err_path = self.log_dir / "output.log", self.log_dir / "stderr.log"
        out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        run.log_start = os.fstat(out_fd).st_size
        started = self.ladder_clock()
        try:
            try:
                proc = subprocess.Popen(
                    launch.argv,
                    cwd=self.worktree,
                    env=env,
                    stdin=subprocess.PIPE if launch.stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                run.spawn_error = (
                    f"{self.harness.display} could not start: {exc.strerror or exc} ({launch.argv[0]}). "
                    f"{self.harness.install_hint}"
                )
                run.spawn_errno = exc.errno
                run.ended_at = now()
                return run
            self.agent_pid = self.agent_pgid = proc.pid
            self.write_status()
            crashpoints.hit("supervisor.agent-spawned")
            if launch.stdin is not None:
                threading.Thread(target=_feed, args=(proc, launch.stdin), daemon=True).start()
            self.pump(proc, run, out_fd, err_fd, watchdog_timeout)
        finally:
            run.log_end = os.fstat(out_fd).st_size
            os.close(out_fd)
            os.close(err_fd)
            self.agent_pid = None
        run.duration = self.ladder_clock() - started
        run.ended_at = now()
        return run

    def pump(
        self, proc: subprocess.Popen[bytes], run: AttemptRun, out_fd: int, err_fd: int, watchdog_timeout: float
    ) -> None:
        """Copy the agent's output verbatim, parse it, and watch for progress and stop requests."""
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        pending = b""
        err_tail = b""
        last_progress = time.monotonic()
        open_streams = 2
        while open_streams:
            if self.stop_event.is_set() and not run.stopped:
                run.stopped = True
                self.kill(proc, run)
            remaining = watchdog_timeout - (time.monotonic() - last_progress)
            if remaining <= 0 and not run.watchdog and not run.stopped:
                run.watchdog = True
                self.kill(proc, run)
            for key, _mask in sel.select(timeout=max(0.05, min(1.0, remaining))):
                fd = key.fileobj.fileno()  # type: ignore[union-attr]
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                if key.data == "out":
                    os.write(out_fd, chunk)
                    pending += chunk
                    if b"\n" in pending:
                        *lines, pending = pending.split(b"\n")
                        if self.take(lines, run):
                            last_progress = time.monotonic()
                else:
                    os.write(err_fd, chunk)
                    err_tail = (err_tail + chunk)[-TAIL_BYTES:]
        if pending and self.take([pending], run):
            last_progress = time.monotonic()
        sel.close()
        # The streams closed; the process may linger (a daemonized child): the watchdog still applies.
        while proc.poll() is None:
            if self.stop_event.is_set() and not run.stopped:
                run.stopped = True
                self.kill(proc, run)
            if time.monotonic() - last_progress > watchdog_timeout and not run.watchdog and not run.stopped:
                run.watchdog = True
                self.kill(proc, run)
            time.sleep(0.05)
        code = proc.returncode
        if code is not None and code < 0:
            run.signal = -code
            run.exit_code = 128 - code
        else:
            run.exit_code = code
        run.stderr_tail = redact(err_tail.decode("utf-8", "replace"), self.secrets)

    def take(self, lines: list[bytes], run: AttemptRun) -> bool:
        progress = False
        for line in lines:
            if not line.strip():
                continue
            for event in self.harness.parse(line):
                if (event.kind == "session" and event.session_id) or (event.kind == "result" and event.session_id):
                    self.session_id = event.session_id
                if event.kind != "keepalive":
                    run.events.append(event)
                progress = progress or event.is_progress
        return progress

    def kill(self, proc: subprocess.Popen[bytes], run: AttemptRun) -> None:
        """SIGTERM to the agent's process group, SIGKILL after the grace period."""
        run.we_signalled = True
        threading.Thread(target=_terminate_group, args=(proc,), daemon=True).start()

    # -- post-turn check -------------------------------------------------------------------
    def check_phase(self) -> dict[str, Any] | None:
        command = self.cmd.get("post_turn_check")
        if not command or self.cmd["kind"] == "ask":
            return None
        self.set_phase("check")
        timeout = float(self.cmd.get("post_turn_check_timeout") or 300.0)
        proc = subprocess.Popen(
            command,
            shell=True,
            cwd=self.worktree,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        timed_out = False
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _terminate_group(proc)
            output, _ = proc.communicate()
        lines = output.decode("utf-8", "replace").splitlines()[-CHECK_TAIL_LINES:]
        return {
            "command": command,
            "exit_code": proc.returncode,
            "timed_out": timed_out,
            "timeout": timeout,
            "tail": redact("\n".join(lines), self.secrets),
        }

    @staticmethod
    def attempt_json(a: AttemptRun) -> dict[str, Any]:
        verdict = a.verdict
        if a.stopped:
            outcome, cls, code = "cancelled", None, "stopped"
        elif a.watchdog:
            outcome, cls, code = "failed", None, "watchdog-no-progress"
        elif a.signal is not None and not a.we_signalled:
            outcome, cls, code = "failed", None, "harness-killed"
        elif a.spawn_error:
            outcome, cls, code = (
                "failed",
                FailureClass.FATAL_CONFIG.value,
                ("prompt-unrenderable" if a.argv_error else "harness-missing"),
            )
        elif verdict is not None and verdict.succeeded:
            outcome, cls, code = "succeeded", None, None
        elif verdict is not None:
            outcome, cls, code = "failed", (verdict.failure_class or FailureClass.UNKNOWN).value, verdict.code
        else:
            outcome, cls, code = "indeterminate", None, None
        failure = None
        if code is not None:
            failure = {
                "source": "harness",
                "code": code,
                "phase": "work",
                "category": cls or "process",
                "possible_effects": "unknown" if outcome != "cancelled" else "partial",
                "native": {"exit_code": a.exit_code, "errno": a.spawn_errno, "signal": a.signal},
                "details": {
                    "reason": redact(verdict.reason if verdict else a.spawn_error or "", secret_values(os.environ))[
                        :500
                    ]
                },
                "diagnostic": None,
            }
        return {
            "number": a.number,
            "started_at": rfc3339(a.started_at),
            "ended_at": rfc3339(a.ended_at),
            "outcome": outcome,
            "failure_class": cls,
            "failure": failure,
            "log": [a.log_start, a.log_end],
        }


def killed_by_exit(run: AttemptRun) -> bool:
    """An agent that caught a signal corral did not send and exited 128+n with no result.

    Claude Code, for one, handles SIGTERM and exits 143 instead of dying by the signal.
    """
    code = run.exit_code
    signals = (signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP)
    has_result = any(e.kind == "result" for e in run.events)
    return code is not None and code - 128 in signals and not has_result


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except OSError:
        pass  # the agent exited before reading its prompt; its exit tells the story


def _terminate_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + TERM_GRACE_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group: children that outlived the leader too
    except ProcessLookupError:
        pass


def refused_receipt(command: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """The receipt of a turn whose harness could not even be set up: one failed attempt, no process."""
    at = rfc3339(now())
    message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    reason = redact(str(message), secret_values(os.environ))[:500]
    return {
        "command_id": command.get("command_id"),
        "task_id": command.get("task_id"),
        "kind": command.get("kind", "work"),
        "status": "failed",
        "started_at": at,
        "ended_at": at,
        "delivered": command.get("delivered", []),
        "failure_class": FailureClass.FATAL_CONFIG.value,
        "failure_code": "harness-unknown",
        "failure_reason": reason,
        "failure_attempts": 1,
        "stop_reason": "fatal",
        "attempts": [
            {
                "number": 1,
                "started_at": at,
                "ended_at": at,
                "outcome": "failed",
                "failure_class": FailureClass.FATAL_CONFIG.value,
                "failure": {
                    "source": "corral",
                    "code": "harness-unknown",
                    "phase": "command",
                    "category": FailureClass.FATAL_CONFIG.value,
                    "possible_effects": "none",
                    "native": {"exit_code": None, "errno": None, "signal": None},
                    "details": {"reason": reason},
                    "diagnostic": None,
                },
                "log": [0, 0],
            }
        ],
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m corral.engine.runtime.supervisor PROTOCOL_DIR", file=sys.stderr)
        return 2
    protocol_dir = Path(args[0])
    receipt = proto.read_receipt(protocol_dir / proto.COMMAND)
    if receipt.data is None:
        proto.write_json(
            protocol_dir / proto.RESPONSE,
            {
                "command_id": None,
                "status": "error",
                "error": {
                    "kind": "internal",
                    "phase": "command",
                    "reason": f"command.json could not be read ({receipt.problem})",
                    "exit_code": None,
                    "signal": None,
                    "tail": "",
                },
            },
        )
        return 1
    try:
        sup = Supervisor(protocol_dir, receipt.data)
    except UsageError as exc:  # a refused start (a harness corral does not know): the turn's first attempt
        proto.write_json(protocol_dir / proto.RESPONSE, refused_receipt(receipt.data, exc))
        return 1
    except Exception as exc:  # an internal fault before the run: explained, never silent
        proto.write_json(
            protocol_dir / proto.RESPONSE,
            {
                "command_id": receipt.data.get("command_id"),
                "task_id": receipt.data.get("task_id"),
                "kind": receipt.data.get("kind", "work"),
                "status": "error",
                "error": {
                    "kind": "internal",
                    "phase": "command",
                    "reason": f"internal fault: {type(exc).__name__}: {exc}"[:500],
                    "exit_code": None,
                    "signal": None,
                    "tail": redact(bounded(traceback.format_exc(), 8000), secret_values(os.environ)),
                },
            },
        )
        return 1
    signal.signal(signal.SIGTERM, sup.on_sigterm)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sup.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
