"""The work phase: attempts of the harness, classified, retried at their class's pace until one succeeds.

The pace and the stop come from the one retry policy (``corral.domain.failures.decide``);
a watchdog kill with nothing captured is relaunched (at most the command's relaunch count),
after work it ends the turn; a kill by a signal corral did not send is a crash. While it
waits between attempts the live retry state is in ``status.json``. An attempt corral ended
at a harness's own retry line (see :mod:`corral.engine.runtime.attempts`) is classified from
that line and goes through the same policy: the harness's cadence is never the one used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from msgspec import Struct, field

from corral.adapters.harness.base import AgentTools, Harness, Launch, TurnRequest, Verdict
from corral.domain.agent_tools import TOKEN_ENV
from corral.domain.clock import rfc3339, utcnow
from corral.domain.delays import Delays
from corral.domain.exits import exit_reason
from corral.domain.failures import (
    FAST_FAILURES_FOR_LOOP,
    RETRY_REASON_BYTES,
    Budgets,
    FailureClass,
    Retry,
    attempts_bound,
    decide,
    decide_watchdog_retry,
)
from corral.domain.redact import CUT_MARGIN, redact
from corral.domain.usage_limit import Beyond, reset_of
from corral.domain.usage_limit import verdict as usage_verdict
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.attempts import AttemptRun, AttemptRunner
from corral.engine.runtime.gitfacts import GitProbe
from corral.engine.runtime.heartbeat import StatusReporter
from corral.engine.runtime.stopping import StopFlag, Stopped
from corral.engine.runtime.usage_pause import UsagePauses

#: Bytes of a failure's reason kept in the receipt's evidence (the live retry state keeps
#: ``domain.failures.RETRY_REASON_BYTES``).
FAILURE_REASON_BYTES = 2000


def agent_tools(command: proto.Command, env: Mapping[str, str]) -> AgentTools | None:
    """The agent's door to corral's tools: the command's endpoint and the token the launch put in
    this supervisor's environment (never in a file), or None when the turn runs without them."""
    spec = command.agent_tools
    token = env.get(TOKEN_ENV, "").strip()
    if spec is None or not spec.url or not token:
        return None
    confined = command.sandbox is not None and command.sandbox.confined and not command.posture.read_only
    return AgentTools(url=spec.url, token=token, timeout_seconds=spec.timeout_seconds, shell=confined)


class WorkOutcome(Struct):
    """How the work phase ended: success, a classified stop (failed), or an error."""

    attempts: list[AttemptRun] = field(default_factory=list)
    status: proto.ReceiptStatus = proto.ReceiptStatus.COMPLETED
    error: proto.TurnError | None = None
    failure_class: str | None = None
    failure_code: str | None = None
    failure_reason: str | None = None
    failure_attempts: int | None = None
    stop_reason: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status is proto.ReceiptStatus.COMPLETED

    def result_text(self) -> str | None:
        last = self.attempts[-1].verdict if self.attempts else None
        return last.result_text if last else None

    def usage(self) -> dict[str, object] | None:
        for run in reversed(self.attempts):
            for event in reversed(run.events):
                if event.kind == "result" and event.usage:
                    return event.usage
        return None


class WorkPhase:
    """The attempt loop of one turn."""

    def __init__(
        self,
        command: proto.Command,
        harness: Harness,
        runner: AttemptRunner,
        probe: GitProbe,
        status: StatusReporter,
        stop: StopFlag,
        secrets: list[str],
        clock: Callable[[], float],
        error_tail: Callable[[], str],
        pauses: UsagePauses | None = None,
        wall: Callable[[], datetime] = utcnow,
    ) -> None:
        self.pauses = pauses
        self.wall = wall
        self.account = harness.account() if pauses is not None else None
        self.first = False  # this turn goes first after its account's reset, until it gets through
        #: Called after each attempt with what it saw (the failure journal's scan and observations).
        self.observe: Callable[[AttemptRun], None] | None = None
        self.command = command
        self.harness = harness
        self.runner = runner
        self.probe = probe
        self.status = status
        self.stop = stop
        self.secrets = secrets
        self.clock = clock
        self.error_tail = error_tail
        self.outcome = WorkOutcome()
        self.tools = agent_tools(command, os.environ)

    def launch_for(self, prompt: str) -> Callable[[], Launch]:
        def launch() -> Launch:
            req = self.command_request(prompt)
            return self.harness.ask(req) if self.command.kind == "ask" else self.harness.work(req)

        return launch

    def command_request(self, prompt: str) -> TurnRequest:
        c = self.command
        return TurnRequest(
            prompt=prompt,
            cwd=c.worktree,
            system=c.system,
            resume_id=self.runner.session_id,
            model=c.model,
            posture=c.posture,
            kind=c.kind,
            task_ref=c.task_ref,
            task_id=c.task_id,
            prompt_dir=c.log_dir,
            tools=self.tools,
        )

    def _error(self, run: AttemptRun, kind: proto.ErrorKind, reason: str) -> WorkOutcome:
        self.outcome.status = proto.ReceiptStatus.ERROR
        self.outcome.error = proto.TurnError(
            kind=kind,
            phase=self.status.phase,
            reason=reason,
            exit_code=run.exit_code,
            signal=run.signal,
            tail=self.error_tail(),
        )
        return self.outcome

    def run(self, prompt: str) -> WorkOutcome:
        """Attempts until one succeeds or the policy says stop; raises :class:`Stopped` on a stop request."""
        try:
            return self._run(prompt)
        finally:
            if self.first and self.pauses is not None and self.account is not None:
                self.pauses.give_up(self.account, self.command.task_id)  # the next one may go first

    def _await_account(self) -> WorkOutcome | None:
        """Wait while the harness account's usage limit holds (no attempt, no budget, no watchdog spent);
        the outcome when the reset it waits for is past the budget (the task parks with the date)."""
        if self.pauses is None or self.account is None:
            return None
        waited = False
        while True:
            turn = self.pauses.turn(self.account, self.command.task_id)
            if turn.go:
                self.first = turn.first
                if waited:
                    self.status.update(phase="work", waiting=None)
                return None
            if turn.until is not None:
                decided = usage_verdict(turn.until, self.wall(), self.command.budgets.overload_seconds)
                if isinstance(decided, Beyond):  # noted by another task, with a longer budget of its own
                    return self._park(decided, "the account's usage limit, noted by another task")
            waited = True
            wait = proto.AccountWait(
                resets_at=rfc3339(turn.resets_at) if turn.resets_at else None,
                harness=self.harness.name,
                behind_first=turn.until is None,
            )
            self.status.update(phase="waiting", waiting=wait, retry=None)
            delays = self.command.delays
            nap = delays.usage_limit_poll
            if turn.until is not None:
                nap = min(max((turn.until - self.wall()).total_seconds(), 0.0) + 0.05, delays.usage_limit_nap)
            self.stop.wait(nap)
            if self.stop.is_set():
                raise Stopped

    def _got_through(self) -> None:
        if self.first and self.pauses is not None and self.account is not None:
            self.first = False
            self.pauses.got_through(self.account, self.command.task_id)

    def _limit(self, verdict: Verdict) -> bool | WorkOutcome:
        """A usage limit that states its reset: noted for the account (True: wait for it), or past
        the budget (the outcome: parked with the date); False when it states no reset."""
        if verdict.usage_limit is None or self.pauses is None or self.account is None:
            return False
        now = self.wall()
        resets_at = reset_of(verdict.usage_limit, now)
        if resets_at is None or resets_at <= now:
            # no reset stated, or one already past (a skewed clock, a limit that outlived its
            # stated reset): an overload like any other, on the ladder's pace and budget
            return False
        decided = usage_verdict(resets_at, now, self.command.budgets.overload_seconds)
        if isinstance(decided, Beyond):
            return self._park(decided, verdict.reason)
        reason = _reason(verdict.usage_limit, self.secrets, RETRY_REASON_BYTES)
        self.pauses.note(self.account, self.harness.name, resets_at, reason, self.command.task_id)
        self.first = False
        return True

    def _park(self, decided: Beyond, words: str) -> WorkOutcome:
        """The turn's outcome for a usage limit past the budget: failed, the date in its reason."""
        out = self.outcome
        out.status = proto.ReceiptStatus.FAILED
        out.failure_class = FailureClass.TRANSIENT_OVERLOAD.value
        out.failure_code = "usage-limit-beyond-budget"
        out.failure_reason = _reason(f"{decided.reason} ({words})", self.secrets, FAILURE_REASON_BYTES)
        out.failure_attempts = 1
        out.stop_reason = "usage-limit-beyond-budget"
        return out

    def _run(self, prompt: str) -> WorkOutcome:
        c = self.command
        out = self.outcome
        relaunches = 0
        streak_class: FailureClass | None = None
        streak = 0
        streak_started = self.clock()
        durations: list[float] = []
        number = 0
        while True:
            if self.stop.is_set():
                raise Stopped
            parked = self._await_account()
            if parked is not None:
                return parked
            number += 1
            self.status.update(attempt=number)
            head_before = self.probe.head()
            self.runner.on_progress = self._got_through if self.first else None
            run = self.runner.run(number, self.launch_for(prompt), c.watchdog.timeout_seconds)
            out.attempts.append(run)
            crashed = not run.we_signalled and (run.signal is not None or run.killed_by_exit())
            if not (run.stopped or run.watchdog or crashed):  # classified before it is observed: the
                # journal tells an unclassified non-zero exit (it needs someone) from a model's failure
                run.verdict = self.harness.classify(run.facts())
                if run.argv_error:  # not a missing program: the prompt itself could not be passed
                    run.verdict = Verdict(False, FailureClass.FATAL_CONFIG, "prompt-unrenderable", run.verdict.reason)
            if self.observe is not None:
                self.observe(run)
            if run.stopped:
                raise Stopped
            if run.watchdog:
                captured = self.probe.work_captured(head_before)
                if decide_watchdog_retry(captured, relaunches, c.watchdog.relaunches):
                    relaunches += 1
                    continue
                return self._error(
                    run, proto.ErrorKind.WATCHDOG, watchdog_reason(c.watchdog.timeout_seconds, relaunches)
                )
            if crashed:
                return self._error(run, proto.ErrorKind.CRASH, exit_reason(run.exit_code, run.signal))
            verdict = run.verdict = run.verdict or self.harness.classify(run.facts())  # classified above
            if verdict.succeeded:
                return out
            limited = self._limit(verdict)
            if isinstance(limited, WorkOutcome):
                return limited
            if limited:
                continue  # the account waits for its reset: no streak, no budget spent
            failure_class = verdict.failure_class or FailureClass.UNKNOWN
            if failure_class is not streak_class:
                streak_class, streak, streak_started, durations = failure_class, 0, self.clock(), []
            streak += 1
            durations.append(run.duration)
            decision = decide(failure_class, streak, self.clock() - streak_started, c.budgets, durations, c.delays)
            if isinstance(decision, Retry):
                elapsed = self.clock() - streak_started
                plan = schedule(failure_class, streak, elapsed, durations, c.budgets, c.delays)
                now = self.wall()
                retry = proto.RetryState(
                    attempt=number,
                    failure_class=failure_class.value,
                    reason=_reason(verdict.reason, self.secrets, RETRY_REASON_BYTES),
                    next_delay_ms=int(decision.delay * 1000),
                    attempts=_bound(number, streak, failure_class, durations, c),
                    next_at=rfc3339(now + timedelta(seconds=decision.delay)),
                    gives_up_by=(
                        rfc3339(now + timedelta(seconds=plan.limit - elapsed)) if plan.limit is not None else None
                    ),
                    at_most=number - streak + plan.attempts if plan.attempts is not None else None,
                    waits_left_ms=int(plan.waits * 1000) if plan.attempts is not None else None,
                )
                self.status.update(phase="retrying", retry=retry)
                self.stop.wait(decision.delay)
                self.status.update(phase="work", retry=None)
                continue
            if decision.reason == "crash-loop":
                self._error(
                    run,
                    proto.ErrorKind.CRASH_LOOP,
                    f"crash loop: {FAST_FAILURES_FOR_LOOP} attempts in a row each failed within "
                    f"{c.delays.crash_loop_window:g} s of its start; the last: "
                    f"{_reason(verdict.reason, self.secrets, FAILURE_REASON_BYTES)}",
                )
            else:
                out.status = proto.ReceiptStatus.FAILED
            out.failure_class = failure_class.value
            out.failure_code = "retry-budget-exhausted" if decision.reason == "budget-exhausted" else verdict.code
            out.failure_reason = _reason(verdict.reason, self.secrets, FAILURE_REASON_BYTES)
            out.failure_attempts = streak
            out.stop_reason = decision.reason
            return out


#: How many failures ahead :func:`schedule` follows the policy before it gives no count (a ladder of
#: tiny steps over a long budget): far past any default (an hour of network retries is ~62 attempts).
SCHEDULE_STEPS = 10_000


class Schedule(Struct, frozen=True):
    """The ladder's figures from one failure on, if every attempt from then on fails.

    ``attempts``: the most attempts of the failure's run (the streak) the policy allows, None past
    :data:`SCHEDULE_STEPS`; ``waits``: the seconds of waiting still ahead, the wait now starting
    included; ``limit``: for a class bounded by time, its budget in seconds from the run's first attempt.
    """

    attempts: int | None
    waits: float
    limit: float | None


def schedule(
    failure_class: FailureClass,
    streak: int,
    elapsed: float,
    durations: list[float],
    budgets: Budgets,
    delays: Delays,
) -> Schedule:
    """What a person is told while corral waits: the retry policy itself (``domain.failures.decide``) run
    forward from the ``streak``-th failure, ``elapsed`` seconds into the run. A class bounded by time
    counts its next attempts as failing at once (the most that fit: "at most"); an unclassified one as
    taking as long as the last (a fast one stays fast, so the crash-loop detector's bound)."""
    limit = None
    if failure_class is FailureClass.TRANSIENT_OVERLOAD:
        limit = budgets.overload_seconds
    elif failure_class is FailureClass.TRANSIENT_NETWORK:
        limit = budgets.network_seconds
    each = durations[-1] if failure_class is FailureClass.UNKNOWN and durations else 0.0
    seen, attempt, waits = list(durations), streak, 0.0
    for _ in range(SCHEDULE_STEPS):
        decision = decide(failure_class, attempt, elapsed, budgets, seen, delays)
        if not isinstance(decision, Retry):
            return Schedule(attempt, waits, limit)
        waits += decision.delay
        elapsed += decision.delay + each
        attempt += 1
        seen.append(each)
    return Schedule(None, waits, limit)


def _bound(
    number: int, streak: int, failure_class: FailureClass, durations: list[float], c: proto.Command
) -> int | None:
    """The turn's attempt number the policy stops at, counted as the turn counts its attempts."""
    bound = attempts_bound(failure_class.value, durations, c.budgets, c.delays)
    return None if bound is None else number - streak + bound


def _reason(text: str, secrets: list[str], limit: int) -> str:
    """A failure's reason, masked (a window past the cut, so no secret is cut in half unmasked), then cut."""
    return redact(text[: limit + CUT_MARGIN], secrets)[:limit]


def watchdog_reason(timeout: float, relaunches: int) -> str:
    again = (
        f"corral had already relaunched it {relaunches} time{'s' if relaunches != 1 else ''} with no work captured"
        if relaunches
        else "work was captured, so corral did not relaunch it"
    )
    return (
        f"the no-progress watchdog fired: no completed step (a tool result or an assistant message) "
        f"for {int(timeout)} s; keep-alives are not progress; {again}"
    )
