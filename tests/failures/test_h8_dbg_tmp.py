import threading, time
from corral.daemon.service import Daemon
from corral.engine.project import Project
def test_dbg(repo, agent):
    proj = Project.open(repo)
    d = Daemon(proj, tick=0.05); d.prune_every = 0.3
    ev = []; d.on_event = ev.append
    t = threading.Thread(target=d.run); t.start(); time.sleep(1.0); d.request_stop(); t.join(10)
    print([e for e in ev if e["event"] != "pruned"][:5])
    assert 0
