"""Word-level marks inside a line diff: a one-sentence change in a long paragraph reads as the
words that changed, not as a whole deleted line and a whole added one. ``difflib`` (the standard
library's sequence matcher) pairs the words."""

from __future__ import annotations

import difflib
import re
from typing import Any

_WORDS = re.compile(r"\s+|[^\s]+")
# A line pair this different is shown whole: word marks on a rewritten line are only noise.
MIN_SIMILARITY = 0.35


def _segments(words: list[str], changed: set[int]) -> list[dict[str, Any]]:
    """Runs of words, each changed or not (adjacent words of one kind merged)."""
    runs: list[dict[str, Any]] = []
    # a space between two changed words belongs to the change (it reads as one phrase)
    changed = changed | {
        i
        for i in range(1, len(words) - 1)
        if words[i].isspace() and i - 1 in changed and i + 1 in changed
    }
    for index, word in enumerate(words):
        mark = index in changed
        if runs and runs[-1]["changed"] == mark:
            runs[-1]["text"] += word
        else:
            runs.append({"text": word, "changed": mark})
    return runs


def word_pair(before: str, after: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """The two lines as runs of words, the changed ones marked; None when they share too little
    to be read as one line edited."""
    old, new = _WORDS.findall(before), _WORDS.findall(after)
    # how alike the lines are, by their words alone (shared spaces say nothing)
    similar = difflib.SequenceMatcher(a=before.split(), b=after.split(), autojunk=False).ratio()
    if similar < MIN_SIMILARITY:
        return None
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    removed: set[int] = set()
    added: set[int] = set()
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            removed.update(range(i1, i2))
        if tag in ("replace", "insert"):
            added.update(range(j1, j2))
    return _segments(old, removed), _segments(new, added)


def mark_words(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of a line diff (``kind`` del/add/…, ``text``), where each run of deleted lines
    followed by as many added lines is paired line by line and given ``segments``."""
    index = 0
    while index < len(rows):
        if rows[index]["kind"] != "del":
            index += 1
            continue
        start = index
        while index < len(rows) and rows[index]["kind"] == "del":
            index += 1
        dels = rows[start:index]
        adds_start = index
        while index < len(rows) and rows[index]["kind"] == "add":
            index += 1
        adds = rows[adds_start:index]
        if len(dels) == len(adds):
            for removed, added in zip(dels, adds, strict=True):
                pair = word_pair(removed["text"], added["text"])
                if pair is not None:
                    removed["segments"], added["segments"] = pair
    return rows
