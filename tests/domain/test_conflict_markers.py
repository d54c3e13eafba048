"""Which added lines are conflict markers, read from the zero-context patch real git writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from corral.domain.conflict_markers import Region, find, named
from tests.conftest import git


def _patch(repo: Path, files: dict[str, str]) -> str:
    """The ``-U0`` patch of committing ``files`` onto the repository's tip."""
    for name, content in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "change")
    return subprocess.run(
        ["git", "diff", "-U0", "--text", "--no-textconv", "--no-ext-diff", "--no-color", "HEAD~1", "HEAD"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_regions_are_named_by_file_and_new_line_numbers(repo: Path) -> None:
    (repo / "a.py").write_text("one\ntwo\nthree\n")
    git(repo, "add", "a.py")
    git(repo, "commit", "-qm", "a")
    patch = _patch(
        repo,
        {
            "a.py": "one\n<<<<<<< HEAD\ntwo\n=======\ntwo, theirs\n>>>>>>> main\nthree\n",
            "diff3.txt": "<<<<<<< ours\nx\n||||||| base\nb\n=======\ny\n>>>>>>> theirs\n",
            "tab\there.md": "<<<<<<< a\r\n=======\r\n>>>>>>> b\r\n",
        },
    )
    assert find(patch) == [Region("a.py", 2, 6), Region("diff3.txt", 1, 7), Region("tab\there.md", 1, 3)]
    assert named(find(patch)) == 'a.py:2-6, diff3.txt:1-7, "tab\\there.md":1-3'


def test_a_heading_underline_a_lone_marker_and_a_removed_region_are_not_regions(repo: Path) -> None:
    (repo / "old.txt").write_text("<<<<<<< a\n=======\n>>>>>>> b\n")
    git(repo, "add", "old.txt")
    git(repo, "commit", "-qm", "old markers")
    patch = _patch(
        repo,
        {
            "old.txt": "resolved\n",  # the markers removed: what a resolution looks like
            "README.md": "Title\n=======\n\n>>>>>>> a quote\n<<<<<<< an arrow, never closed\n",
            "plus.txt": "++ <<<<<<< x\n",  # an added line reading "+++ …" in the patch is no header
        },
    )
    assert find(patch) == []


def test_named_caps_the_list_and_counts_the_rest() -> None:
    regions = [Region(f"f{i}.txt", 1, 3) for i in range(13)]
    assert named(regions).endswith("f9.txt:1-3 (and 3 more)")
