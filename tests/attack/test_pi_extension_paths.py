"""The person's own Pi extensions (``pi_extensions``) must never name a file a confined agent can write.

Pi resolves an ``-e`` path that is not absolute against its working directory (its loader's ``resolvePath``),
and corral starts a turn's Pi in the task's worktree: a relative entry would load the agent's own file as an
extension beside corral's, with the turn's token in its environment and the power to stand in for corral's
``bash``. A relative entry is refused where the setting is read, from every source; a repository may not set
it at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.engine.config import load_config
from corral.errors import ConfigError


@pytest.mark.parametrize("entry", ["tools/mine.ts", "./mine.ts", "mine.ts", "../outside.ts"])
def test_a_relative_extension_path_is_refused_from_the_user_file_and_the_environment(
    tmp_path: Path, entry: str
) -> None:
    user = tmp_path / "config.toml"
    user.write_text(f"pi_extensions = [{entry!r}]\n".replace("'", '"'))
    with pytest.raises(ConfigError) as caught:
        load_config(user_file=user, project_file=None, env={})
    assert "pi_extensions" in caught.value.message and "worktree" in caught.value.message
    assert "absolute" in (caught.value.hint or "")
    with pytest.raises(ConfigError):
        load_config(user_file=None, project_file=None, env={"CORRAL_PI_EXTENSIONS": entry})


def test_absolute_home_and_package_extension_sources_are_taken(tmp_path: Path) -> None:
    taken = ["/opt/pi/mine.ts", "~/pi/mine.ts", "npm:@someone/pi-thing", "git:github.com/someone/thing"]
    user = tmp_path / "config.toml"
    user.write_text("pi_extensions = [" + ", ".join(f'"{e}"' for e in taken) + "]\n")
    assert load_config(user_file=user, project_file=None, env={})["pi_extensions"] == taken


def test_a_repository_cannot_set_pi_extensions(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "corral.toml").write_text('pi_extensions = ["/tmp/evil.ts"]\n')
    config = load_config(user_file=None, project_file=repo / "corral.toml", env={})
    assert config["pi_extensions"] == []
