"""A scenario-driven fake agent: test seam 1, and the scripted agent of ``corral demo``.

It speaks Claude Code's stream-json, so it stands in for ``claude`` exactly. Each
invocation runs the next list of steps from the scenario file named by
``CORRAL_FAKE_SCENARIO`` (JSON: ``{"invocations": [[step, …], …], "default": [step, …]}``)
and appends what it received (argv, cwd, stdin, the prompt, selected environment)
as one JSON line to ``$CORRAL_FAKE_RECORD/invocations.jsonl``. Run by the ``command``
harness, it takes its prompt from ``CORRAL_PROMPT_FILE`` and records the contract's
``CORRAL_*`` variables (docs/harnesses.md).

Steps: ``{"init": true}``, ``{"text": s}``, ``{"tool": name, "input": {…}, "is_error": b,
"output": s}``, ``{"result": s, "is_error": b, "status": n}``, ``{"emit": {…}}``,
``{"stdout": s}``, ``{"stderr": s}``, ``{"sleep": seconds}``, ``{"keepalive": seconds}``,
``{"hold": path}`` (keeps alive while the file ``path`` exists),
``{"write": {"path": p, "content": s}}``, ``{"commit": message}``, ``{"git": [arg, …]}`` (runs
``git arg …`` in the agent's working directory with the agent's environment, and fails the
agent when git fails), ``{"exit": code}``,
``{"kill": "KILL"}``, ``{"ignore_sigterm": true}``, ``{"bytes": n}``, ``{"echo_env": name}``,
``{"say_prompt": true}``, ``{"transcript": s}`` (appends the line ``s`` to the session's transcript
where Claude Code keeps it: ``<config dir>/projects/<the working directory's key>/<session>.jsonl``).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path

# The fake agent starts once per turn of every test that runs one: it loads what it always needs and no
# more (``typing`` for annotations only, ``subprocess`` for the steps that run git).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: The command harness's contract (``corral.adapters.harness.command.CONTRACT_VARS``, a test keeps the
#: two equal), written out: importing corral for it was half of each fake turn's start-up CPU.
CONTRACT_VARS = (
    "CORRAL_PROMPT_FILE",
    "CORRAL_TURN_KIND",
    "CORRAL_TURN_TRIGGER",
    "CORRAL_TASK",
    "CORRAL_TASK_ID",
    "CORRAL_WORKTREE",
    "CORRAL_READ_ONLY",
    "CORRAL_MCP_URL",
    "CORRAL_AGENT_TOKEN",
)

DEFAULT: list[dict[str, Any]] = [
    {"init": True},
    {"text": "Looking at the task."},
    {"result": "Done."},
]
RECORDED_ENV = ("IS_SANDBOX", "ANTHROPIC_BASE_URL", "HOME", *CONTRACT_VARS)  # with the command harness's contract


def uuid4() -> str:
    """A random (version 4) UUID, as Claude Code's session ids are, without loading :mod:`uuid`."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def arg_after(argv: list[str], flag: str) -> str | None:
    if flag in argv:
        i = argv.index(flag)
        if i + 1 < len(argv):
            return argv[i + 1]
    return None


def prompt_of(argv: list[str], stdin: str) -> str:
    """The prompt: after ``-p`` as Claude Code takes it, else the command harness's prompt file, else stdin."""
    if "-p" in argv:
        i = argv.index("-p")
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if nxt is not None and not nxt.startswith("--"):
            return nxt
    prompt_file = os.environ.get("CORRAL_PROMPT_FILE")
    if prompt_file:
        return Path(prompt_file).read_text(encoding="utf-8")
    return stdin


def next_steps(record_dir: Path | None) -> list[dict[str, Any]]:
    scenario_path = os.environ.get("CORRAL_FAKE_SCENARIO")
    if not scenario_path:
        return DEFAULT
    scenario = json.loads(Path(scenario_path).read_text())
    invocations = scenario.get("invocations") or []
    counter = (record_dir or Path(scenario_path).parent) / "fake-agent.count"
    counter.parent.mkdir(parents=True, exist_ok=True)
    # Several agents may start at once (tasks in parallel): each takes the next number, none the same.
    with open(counter.with_suffix(".lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        n = int(counter.read_text() or 0) if counter.exists() else 0
        counter.write_text(str(n + 1))
    if n < len(invocations):
        return list(invocations[n])
    return list(scenario.get("default") or DEFAULT)


def main() -> int:
    argv = sys.argv[1:]
    stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    record = os.environ.get("CORRAL_FAKE_RECORD")
    record_dir = Path(record) if record else None
    session_id = arg_after(argv, "--resume") or uuid4()
    prompt = prompt_of(argv, stdin)
    if record_dir is not None:
        record_dir.mkdir(parents=True, exist_ok=True)
        entry = {
            "argv": argv,
            "cwd": os.getcwd(),
            "prompt": prompt,
            "stdin": stdin,
            "env": {k: os.environ[k] for k in RECORDED_ENV if k in os.environ},
            "pid": os.getpid(),
            "at": time.time(),
        }
        with open(record_dir / "invocations.jsonl", "a") as fh:
            fh.write(json.dumps(entry) + "\n")
    for step in next_steps(record_dir):
        run_step(step, session_id, prompt)
    return 0


def run_step(step: dict[str, Any], session_id: str, prompt: str) -> None:
    if step.get("init"):
        emit({"type": "system", "subtype": "init", "session_id": session_id, "tools": ["Bash", "Write"]})
    if "text" in step:
        emit(
            {
                "type": "assistant",
                "session_id": session_id,
                "message": {"role": "assistant", "content": [{"type": "text", "text": step["text"]}]},
            }
        )
    if "tool" in step:
        tool_id = f"toolu_{uuid4().replace('-', '')[:12]}"
        emit(
            {
                "type": "assistant",
                "session_id": session_id,
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": tool_id, "name": step["tool"], "input": step.get("input", {})}
                    ],
                },
            }
        )
        emit(
            {
                "type": "user",
                "session_id": session_id,
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": tool_id,
                            "is_error": bool(step.get("is_error")),
                            "content": step.get("output", ""),
                        }
                    ],
                },
            }
        )
    if "result" in step:
        event: dict[str, Any] = {
            "type": "result",
            "subtype": "success" if not step.get("is_error") else "error",
            "is_error": bool(step.get("is_error")),
            "result": step["result"],
            "session_id": session_id,
            "usage": {"input_tokens": 10, "output_tokens": 5},
            "total_cost_usd": 0.0,
        }
        if step.get("status") is not None:
            event["api_error_status"] = step["status"]
        emit(event)
    if "emit" in step:
        emit(step["emit"])
    if "stdout" in step:
        sys.stdout.write(step["stdout"])
        sys.stdout.flush()
    if "stderr" in step:
        sys.stderr.write(step["stderr"])
        sys.stderr.flush()
    if step.get("say_prompt"):
        emit(
            {
                "type": "assistant",
                "session_id": session_id,
                "message": {"role": "assistant", "content": [{"type": "text", "text": prompt}]},
            }
        )
    if "echo_env" in step:
        name = step["echo_env"]
        emit(
            {
                "type": "assistant",
                "session_id": session_id,
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": f"{name}={os.environ.get(name, '')}"}],
                },
            }
        )
        sys.stderr.write(f"{name}={os.environ.get(name, '')}\n")
    if "transcript" in step:
        from corral.adapters.harness.claude import config_dir, project_key

        transcript = config_dir(os.environ) / "projects" / project_key(Path.cwd()) / f"{session_id}.jsonl"
        transcript.parent.mkdir(parents=True, exist_ok=True)
        with transcript.open("a") as fh:
            fh.write(json.dumps({"type": "user", "sessionId": session_id, "text": step["transcript"]}) + "\n")
    if "write" in step:
        path = Path(step["write"]["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(step["write"].get("content", ""))
    if "commit" in step:
        import subprocess

        subprocess.run(["git", "add", "-A"], check=True)
        subprocess.run(
            [
                "git",
                "-c",
                "user.name=Fake Agent",
                "-c",
                "user.email=agent@example.com",
                "commit",
                "-q",
                "-m",
                step["commit"],
            ],
            check=True,
        )
    if "git" in step:
        import subprocess

        subprocess.run(["git", *[str(a) for a in step["git"]]], check=True)
    if step.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "keepalive" in step:
        end = time.monotonic() + float(step["keepalive"])
        while time.monotonic() < end:
            emit({"type": "system", "subtype": "keepalive"})
            time.sleep(0.2)
    if "hold" in step:  # works on (keeping alive) for as long as the file named exists
        held = Path(str(step["hold"]))
        while held.exists():
            emit({"type": "system", "subtype": "keepalive"})
            time.sleep(0.2)
    if "bytes" in step:
        line = json.dumps({"type": "system", "subtype": "noise", "pad": "x" * 1000}) + "\n"
        data = line.encode() * (int(step["bytes"]) // len(line) + 1)
        out = sys.stdout.buffer
        view = memoryview(data)[: int(step["bytes"])]
        for i in range(0, len(view), 1 << 20):
            out.write(view[i : i + (1 << 20)])
        out.flush()
    if "sleep" in step:
        time.sleep(float(step["sleep"]))
    if "kill" in step:
        os.kill(os.getpid(), getattr(signal, f"SIG{step['kill']}"))
    if "exit" in step:
        sys.stdout.flush()
        os._exit(int(step["exit"]))


def wrapper_script(directory: Path, name: str = "claude") -> Path:
    """An executable named ``name`` that runs this fake agent with the current Python, as a script by its
    path (tests and benchmarks find the agent's process by it): run as a module, it would load the
    ``corral`` package first, and with it msgspec, which the fake agent never uses.

    It reads the interpreter's installed bytecode, as an installed agent's runtime does: a
    ``PYTHONPYCACHEPREFIX`` (a benchmark's, under ``/tmp``) is dropped, since a sandboxed turn does not
    see it and compiled the standard library afresh at every start (~70 ms of CPU); nothing is written
    in its stead (``PYTHONDONTWRITEBYTECODE``), as the prefix kept bytecode out of the source tree."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    import shlex

    script = shlex.quote(str(Path(__file__).resolve()))
    cache = 'if [ -n "${PYTHONPYCACHEPREFIX:-}" ]; then unset PYTHONPYCACHEPREFIX; export PYTHONDONTWRITEBYTECODE=1; fi'
    path.write_text(f'#!/bin/sh\n{cache}\nexec {shlex.quote(sys.executable)} {script} "$@"\n')
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    sys.exit(main())
