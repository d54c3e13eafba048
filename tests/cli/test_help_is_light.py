"""``corral --help`` and ``--version`` load no server: neither asyncio (the dashboard's and MCP's HTTP
server) nor the shared store's driver; ``dashboard --host`` checks an address without the server too."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ["asyncio", "corral.adapters.http_server", "psycopg", "importlib.metadata"]


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["dashboard", "--help"]])
def test_help_and_version_load_no_server(args: list[str]) -> None:
    probe = (
        "import sys\nfrom corral.cli import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_loopback_names_are_the_servers() -> None:
    from corral.adapters import http_server
    from corral.adapters.loopback import LOOPBACK

    assert http_server.LOOPBACK is LOOPBACK
    assert {"127.0.0.1", "::1", "localhost"} <= LOOPBACK


def test_version_reads_no_package_metadata_and_says_the_installed_version() -> None:
    from importlib.metadata import version

    import corral

    out = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom corral.cli import main\ntry:\n    main(['--version'])\n"
         "except SystemExit:\n    pass\nprint('importlib.metadata' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    said, loaded = out.stdout.strip().splitlines()
    assert said == f"corral {version('corral')}" == f"corral {corral.__version__}"
    assert loaded == "False"
