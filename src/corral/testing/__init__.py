"""Test seams shipped with corral: the scenario-driven fake agent (used by `corral demo`)."""
