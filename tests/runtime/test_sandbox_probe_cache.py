"""The sandbox probe is made once per host and bubblewrap: kept under CORRAL_HOME, keyed by the host,
its kernel and the bwrap binary, made again when bubblewrap changes or a launch in the sandbox fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.adapters import sandbox as sandboxing
from corral.adapters.sandbox import AUTO, BWRAP, forget_probe, resolve

needs_bwrap = pytest.mark.skipif(
    sandboxing.find_bwrap() is None and not os.environ.get("CI"), reason="bubblewrap is not installed"
)


def counting_bwrap(directory: Path, log: Path, extra: str = "") -> Path:
    """A ``bwrap`` on PATH that logs each run, then runs the real one."""
    real = sandboxing.find_bwrap()
    assert real is not None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bwrap"
    path.write_text(f'#!/bin/sh\n{extra}echo run >> "{log}"\nexec "{real}" "$@"\n')
    path.chmod(0o755)
    return path


def probes(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def resolved(bin_dir: Path, cache: Path) -> sandboxing.SandboxSpec:
    sandboxing._probed.clear()  # a new process: only what is kept on disk is remembered
    return resolve(AUTO, env={"PATH": str(bin_dir)}, probe_cache=cache)


@needs_bwrap
def test_the_probe_is_kept_for_the_host_and_made_again_when_bubblewrap_changes(tmp_path: Path) -> None:
    log, cache, bin_dir = tmp_path / "runs.log", tmp_path / "home" / sandboxing.PROBE_CACHE, tmp_path / "bin"
    counting_bwrap(bin_dir, log)
    first = resolved(bin_dir, cache)
    assert first.mode == BWRAP and first.probe_cache == str(cache)
    assert probes(log) == 1 and cache.exists()
    assert resolved(bin_dir, cache).mode == BWRAP
    assert probes(log) == 1  # kept: the next launch, another process, does not probe

    counting_bwrap(bin_dir, log, extra=": a newer bubblewrap\n")  # bubblewrap upgraded: another binary
    assert resolved(bin_dir, cache).mode == BWRAP
    assert probes(log) == 2
    assert resolved(bin_dir, cache).mode == BWRAP
    assert probes(log) == 2


@needs_bwrap
def test_a_failed_launch_forgets_the_probe_and_the_next_launch_probes_again(tmp_path: Path) -> None:
    log, cache, bin_dir = tmp_path / "runs.log", tmp_path / "home" / sandboxing.PROBE_CACHE, tmp_path / "bin"
    counting_bwrap(bin_dir, log)
    spec = resolved(bin_dir, cache)
    assert probes(log) == 1
    forget_probe(spec)  # what a launch whose bwrap failed does
    assert not cache.exists()
    assert resolved(bin_dir, cache).mode == BWRAP
    assert probes(log) == 2


@needs_bwrap
def test_a_bwrap_that_does_not_work_is_kept_as_such_and_auto_runs_unconfined(tmp_path: Path) -> None:
    log, cache, bin_dir = tmp_path / "runs.log", tmp_path / "home" / sandboxing.PROBE_CACHE, tmp_path / "bin"
    counting_bwrap(bin_dir, log, extra='echo run >> "' + str(log) + '"; echo "bwrap: no namespaces" >&2; exit 1\n')
    spec = resolved(bin_dir, cache)
    assert spec.mode == "off" and "bwrap: no namespaces" in spec.reason
    assert resolved(bin_dir, cache).mode == "off"
    assert probes(log) == 1  # the broken answer is kept too, until bubblewrap changes


def test_a_cache_that_cannot_be_read_is_a_probe_not_a_failure(tmp_path: Path) -> None:
    cache = tmp_path / sandboxing.PROBE_CACHE
    cache.write_text("{not json")
    assert sandboxing._read_probe(cache, ["any"]) is None
    cache.write_text('{"key": ["other"], "broken": null}')
    assert sandboxing._read_probe(cache, ["any"]) is None
    cache.write_text('{"key": ["any"], "broken": 7}')
    assert sandboxing._read_probe(cache, ["any"]) is None
    cache.write_text('{"key": ["any"], "broken": "bwrap exited 1"}')
    assert sandboxing._read_probe(cache, ["any"]) == ("bwrap exited 1",)
