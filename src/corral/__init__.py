"""corral: run AI coding agents on tasks in a git repository, supervised so nothing is lost."""

__version__ = "0.1.0"
