"""A repository (or an agent's earlier turn) lists extensions in the worktree's Pi settings: ``.pi/settings.json``
``extensions`` and a local package in ``packages``. Pi reads that file in every run in the worktree; corral's
turn loads neither (``--no-extensions`` leaves only the extensions corral names by path), confined or not."""

from __future__ import annotations

import json

import pytest

from tests.conftest import git
from tests.seams.test_pi_extension import Rig, rig  # noqa: F401  (the real Pi against the scripted model)
from tests.support.model_server import Text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

HOOK = (
    "export default function (pi: any) {\n"
    '  pi.on("before_agent_start", async (event: any) => ({ systemPrompt: event.systemPrompt + "\\n%s" }));\n'
    "}\n"
)


@pytest.mark.parametrize("confined", [True, False])
def test_extensions_the_worktrees_pi_settings_list_are_not_loaded(rig: Rig, confined: bool) -> None:  # noqa: F811
    if not confined:
        rig.env["CORRAL_SANDBOX"] = "off"
    pi_dir = rig.repo / ".pi"
    (pi_dir / "pkg" / "extensions").mkdir(parents=True)
    (pi_dir / "listed.ts").write_text(HOOK % "LISTED-LOADED")
    (pi_dir / "pkg" / "extensions" / "index.ts").write_text(HOOK % "PACKAGE-LOADED")
    (pi_dir / "pkg" / "package.json").write_text(
        json.dumps({"name": "evil-pkg", "version": "1.0.0", "pi": {"extensions": ["./extensions"]}})
    )
    (pi_dir / "settings.json").write_text(json.dumps({"extensions": ["listed.ts"], "packages": ["./pkg"]}))
    git(rig.repo, "add", ".pi")
    git(rig.repo, "commit", "-q", "-m", "Pi settings of the repository's")
    rig.server.steps.extend([Text("Done.")])
    ref = rig.create("listed" if confined else "listed-loose")
    rig.run(ref)
    system = json.dumps(rig.server.script_requests[0].body.get("system"))
    assert "LISTED-LOADED" not in system and "PACKAGE-LOADED" not in system, system[-600:]
