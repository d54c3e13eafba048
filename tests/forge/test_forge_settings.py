"""The forge's settings follow the trusted-settings rule: a repository's corral.toml may propose ``forge``, never
turn it on; ``forge_auto_deliver`` is the person's alone."""

from __future__ import annotations

from corral.engine.config import load_config


def test_a_repository_may_propose_the_forge_but_not_turn_it_on(repo, isolated_env):
    (repo / "corral.toml").write_text('forge = "gh"\nforge_auto_deliver = true\n')
    config = load_config(user_file=isolated_env / "user-config.toml", project_file=repo / "corral.toml", strict=False)
    assert config["forge"] is None and config["forge_auto_deliver"] is False
    assert [p.name for p in config.proposals] == ["forge"]
    assert any("forge_auto_deliver" in said and "stranger" in said for said in config.ignored)


def test_the_persons_own_file_turns_the_forge_and_auto_delivery_on(repo, isolated_env):
    (isolated_env / "user-config.toml").write_text('forge = "gh"\nforge_auto_deliver = true\nforge_poll = 60\n')
    config = load_config(user_file=isolated_env / "user-config.toml", project_file=repo / "corral.toml", strict=False)
    assert config["forge"] == "gh" and config["forge_auto_deliver"] is True and config["forge_poll"] == 60.0
