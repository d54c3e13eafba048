"""``completion SHELL``: the shell completion script (bash, zsh, fish), and the task refs it completes.

The script is click's: the shell calls ``corral`` back with ``_CORRAL_COMPLETE`` set, and
an argument named TASK answers with the refs in the store (:func:`complete_refs`), read
without creating anything: no repository or no database completes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app

SHELLS = ("bash", "zsh", "fish")
_RC = {
    "bash": ("~/.bashrc", 'eval "$(corral completion bash)"'),
    "zsh": ("~/.zshrc", 'eval "$(corral completion zsh)"'),
    "fish": ("~/.config/fish/completions/corral.fish", "corral completion fish | source"),
}


@click.command(
    epilog="""\b
Examples:
  corral completion bash                          print the script
  eval "$(corral completion bash)"                use it in this shell
  corral completion zsh --install                 add the line to ~/.zshrc
  corral completion fish > ~/.config/fish/completions/corral.fish
\b
Commands, options and task refs complete (corral show fi<TAB> → fix-login).
"""
)
@click.argument("shell", type=click.Choice(SHELLS))
@click.option("--install", is_flag=True, help="Add the line that loads it to your shell's start-up file.")
@json_option
@pass_app
@click.pass_context
def completion(ctx: click.Context, app: App, shell: str, install: bool) -> None:
    """Print (or install) the completion script for SHELL."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None
    script = cls(ctx.find_root().command, {}, "corral", "_CORRAL_COMPLETE").source()
    rc, line = _RC[shell]
    if not install:
        app.answer({"shell": shell, "script": script, "install_line": line}, script.rstrip("\n"))
        return
    path = Path(os.path.expanduser(rc))
    if shell == "fish":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(script, encoding="utf-8")
        said = f"Wrote {path}; new fish shells complete corral."
        added = True
    else:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        added = line not in text
        if added:
            with path.open("a", encoding="utf-8") as fh:
                fh.write(("" if not text or text.endswith("\n") else "\n") + f"{line}\n")
        said = (f"Added to {path}: {line}" if added else f"{path} already loads it.") + " New shells complete corral."
    app.answer({"shell": shell, "file": str(path), "changed": added, "install_line": line}, said)


def complete_refs(ctx: click.Context, incomplete: str) -> list[Any]:
    """Task refs starting with ``incomplete``, unfinished ones first; nothing when there is no store."""
    from click.shell_completion import CompletionItem

    from corral.engine.api import Project, lenient, lookups

    app = ctx.find_object(App)
    repo = app.repo if app is not None else None
    try:
        with lenient():
            project = Project.open(repo)
        store = project.placement.existing_store(project)  # read where the records are, create nothing
        if store is None:
            return []
        try:
            tasks = lookups.every_task(store)
        finally:
            store.close()
    except Exception:  # completion never prints an error into the person's command line
        return []
    done = ("complete", "abandoned")
    found = sorted((t.status.value in done, t.ref) for t in tasks if t.ref.startswith(incomplete))
    by_ref = {t.ref: t for t in tasks}
    return [CompletionItem(ref, help=f"{by_ref[ref].status.value}: {by_ref[ref].goal[:60]}") for _, ref in found]
