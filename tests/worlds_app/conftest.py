"""The source-layer fixtures (toy HTTP sources, a fresh probe cache) for the worlds tests that
run real turns."""

from tests.cognition_app.conftest import _fresh_probe_cache, toy_sources  # noqa: F401
