"""The version of each library a figure came from, read from the installed package's metadata
(importing nothing), so every result can say "scipy 1.17.1" beside its method."""

from __future__ import annotations

import functools
from importlib import metadata


@functools.cache
def version(package: str) -> str:
    return metadata.version(package)


def library(*packages: str) -> str:
    """``library("scipy", "statsmodels")`` → ``"scipy 1.17.1, statsmodels 0.14.5"``."""
    return ", ".join(f"{name} {version(name)}" for name in packages)


def checked_against(*packages: str) -> str:
    """For a figure computed by its formula with numpy (where the library call costs far more
    than the arithmetic): the library whose own answer the tests check it against."""
    return f"numpy {version('numpy')} (formula; checked against {library(*packages)})"
