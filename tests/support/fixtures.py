"""Pytest fixtures for the scripted LLM server.

Enable for every test from tests/conftest.py with:
    pytest_plugins = ["tests.support.fixtures"]
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.scripted_llm import ScriptedLLM

TEST_API_KEY = "test-secret-key"


@pytest.fixture
def scripted_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLM]:
    """A running ScriptedLLM; CHUKWA_LLM_BASE_URL / CHUKWA_LLM_API_KEY point at it.

    The environment is changed in this process only: an already-running Celery worker subprocess
    does not see it."""
    with ScriptedLLM() as llm:
        monkeypatch.setenv("CHUKWA_LLM_BASE_URL", llm.base_url)
        monkeypatch.setenv("CHUKWA_LLM_API_KEY", TEST_API_KEY)
        yield llm


@pytest.fixture
def lax_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLM]:
    """A backend that accepts response_format but ignores the schema."""
    with ScriptedLLM(enforce_schema=False) as llm:
        monkeypatch.setenv("CHUKWA_LLM_BASE_URL", llm.base_url)
        monkeypatch.setenv("CHUKWA_LLM_API_KEY", TEST_API_KEY)
        yield llm
