"""A receipt's stray-ref sweep puts the turn's branch back where the supervisor's own check of it could not be made.

The sweep after a receipt asks whether the branch is there only when it removed something or the supervisor's
ref guard reported an error (the supervisor checked and put back the branch before its receipt otherwise): on a
crash's way to its resume, a clean sweep asks git nothing more.
"""

from __future__ import annotations

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.recovery.working import _swept
from corral.engine.runtime import branch_check
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.ref_guard import RefGuard
from tests.conftest import git
from tests.turns.conftest import ok


def test_a_branch_gone_after_a_receipt_whose_ref_check_failed_is_put_back(rproj, agent, repo):
    agent.script(ok("done"))
    task = tasks.create(rproj, "Lose my branch", actor=Actor.HUMAN)
    turns.start(rproj, task.ref, actor=Actor.HUMAN)
    assert control.wait(rproj, task.ref, timeout=30).task.status is Status.BLOCKED
    command = proto.read_record(rproj.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    assert command is not None
    branch = f"refs/heads/{command.branch}"
    tip = git(repo, "rev-parse", branch)
    git(repo, "update-ref", "-d", branch)  # gone, and the supervisor could not say whether it checked it
    receipt = proto.Receipt(
        command_id=command.command_id,
        task_id=task.id,
        kind="work",
        status=proto.ReceiptStatus.COMPLETED,
        refs=RefGuard(error="the guard could not look"),
    )
    swept = _swept(rproj, receipt, command)
    assert git(repo, "rev-parse", branch) == tip == git(repo, "rev-parse", branch_check.verified_ref(task.ref))
    assert swept.refs is not None and swept.refs.moves  # the put-back is reported with the turn
