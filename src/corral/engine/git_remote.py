"""The git remote corral pushes to and fetches from: the ``remote`` setting (``origin`` by default), checked.

A task's branch reaches a forge (``submit``) and a team's hosts (docs/workers.md#branches) through it.
"""

from __future__ import annotations

from corral.domain.settings import setting
from corral.engine.project import Project
from corral.errors import CorralError


def remote_name(project: Project) -> str:
    """The ``remote`` setting, checked here, where every push, fetch and ls-remote corral makes takes it:
    a remote this repository has (``git remote`` lists it), never a word git would read as an option
    (``--upload-pack=…``). The schema refuses such a value from any source; this is the last word
    before git's argv, whatever the configuration in memory says."""
    name = str(project.config["remote"])
    origin = project.config.values["remote"].origin
    where = f" (set in {origin})" if origin else ""
    why = setting("remote").refusal(name)
    if why is not None:
        raise CorralError(
            f"The remote setting {name!r}{where} is not a remote's name: it would reach git as an option.",
            code="bad-remote",
            hint="Name a remote that `git remote` lists: corral config set remote origin",
        )
    listed = project.git.run("remote", cwd=project.repo, check=False)
    if name not in listed.stdout.splitlines():
        raise CorralError(
            f"The repository has no remote named {name}{where}.",
            code="no-remote",
            hint=(
                f"Set `remote` to one the repository has: corral config set remote {listed.stdout.split()[0]}"
                if listed.stdout.split()
                else f"Add it with its URL (git -C {project.repo} remote add {name} and the URL), then run this again."
            ),
        )
    return name
