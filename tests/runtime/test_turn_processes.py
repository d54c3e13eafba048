"""What a turn left is looked for in its own process container: the supervisor adopts its turn's
orphans (a ``setsid`` grandchild whose parent exited), so they stay its descendants, and the look
never reads the processes that ran before the turn's agent started."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from corral.adapters.pid_identity import proc_info

_SUPERVISOR_LIKE = r"""
import json, os, subprocess, sys, time
from corral.adapters.pid_identity import adopt_orphans, reap, start_ticks, turn_processes
adopted = adopt_orphans()
agent = subprocess.Popen(["sh", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!"], stdout=subprocess.PIPE, text=True)
since = start_ticks(agent.pid)
left = int(agent.stdout.readline())
agent.wait()
time.sleep(0.2)
found = turn_processes(os.getpid(), since)
older = int(sys.argv[1])
reaped = reap([p for p in found if p.pid == left], 1.0)
print(json.dumps({"adopted": adopted, "left": left, "found": [p.pid for p in found], "older": older,
                  "reaped": [p.pid for p in reaped], "ppid": open(f"/proc/{left}/stat").read().split()[3]
                  if os.path.exists(f"/proc/{left}/stat") else None}))
"""


def test_an_orphan_the_agent_left_is_found_and_ended_and_an_older_process_is_not_looked_at() -> None:
    older = subprocess.Popen(["sleep", "60"])  # was running before the turn: never the turn's
    try:
        time.sleep(0.05)
        out = subprocess.run(
            [sys.executable, "-c", _SUPERVISOR_LIKE, str(older.pid)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout.strip().splitlines()[-1])
        assert doc["adopted"] is True
        assert doc["left"] in doc["found"]  # the setsid grandchild, orphaned, is still the turn's
        assert doc["older"] not in doc["found"]
        assert doc["reaped"] == [doc["left"]]
        assert proc_info(doc["left"]) is None  # ended, and waited for (no zombie left)
    finally:
        older.kill()
        older.wait()
