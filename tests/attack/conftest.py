"""The dashboard's fixtures (its daemon over two repositories), for the attacks on its forms."""

from tests.dashboard.conftest import dash, two  # noqa: F401
