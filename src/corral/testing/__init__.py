"""Test seams shipped with corral: the scenario-driven fake agent (used by `corral demo`), and a process runner
that records what it is asked to run and plays scripted results (``fake_runner``)."""
