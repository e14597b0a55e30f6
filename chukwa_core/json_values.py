"""What a JSON value must be to be stored and hashed faithfully. Pure: no Django.

PostgreSQL cannot store U+0000 in text or JSONB, nor encode a lone UTF-16 surrogate; JSONB has no
NaN or Infinity; and JSONB keeps a number as a decimal, so a float written as ``1e+20`` reads back
as the integer ``100000000000000000000``. RFC 8785 reads every JSON number as an IEEE 754 double.
:func:`hashable` admits only numbers that survive both exactly, so content read back from the
database always hashes to the key it was stored under (``manage.py fsck`` checks it).
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

# Beyond this, an integer is not exactly a double; RFC 8785 (and the rfc8785 library) refuse it.
MAX_EXACT_INT = 2**53 - 1
OUT_OF_RANGE = (
    "numbers must lie within ±(2^53-1) to be stored and hashed exactly; write larger ones as "
    "strings"
)


class UnstorableValue(ValueError):
    """A value PostgreSQL cannot store or RFC 8785 cannot hash; ``pointer`` says where."""

    def __init__(self, pointer: str, problem: str) -> None:
        super().__init__(f"{pointer or '(root)'}: {problem}")
        self.pointer = pointer
        self.problem = problem


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_STRICT = json.JSONDecoder(parse_constant=_refuse_constant)

# An integer of 19 digits or more may lie beyond 64 bits, which orjson reads as a float (json
# keeps it exact); such a text goes to json. Found by mapping every ASCII digit to "0" and every
# other byte to " " (bytes.translate, in C) and looking for 19 zeros: a regular expression took
# 25 ns a character (0.7 ms for a 27 kB world state, five times json's own reading of it).
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_NINETEEN = b"0" * 19


def _long_digit_run(text: str | bytes) -> bool:
    """Does the text hold 19 ASCII digits in a row (JSON numbers are written in ASCII)?"""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return _NINETEEN in data.translate(_DIGITS_AS_ZERO)


def loads_strict(text: str | bytes) -> Any:
    """``json.loads`` without the NaN / Infinity extensions Python accepts by default.

    orjson reads it first (three to four times faster on a stream's many small events); what
    orjson refuses — a lone surrogate escape, a number beyond a double's range, anything not
    JSON (bytes that are not UTF-8, a byte order mark) — and any text with a run of 19 digits
    is read by ``json`` instead, so the value and the error are always ``json.loads``'s."""
    if isinstance(text, str | bytes) and not _long_digit_run(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    if isinstance(text, str) and not text.startswith("\ufeff"):  # json.loads refuses a BOM
        return _STRICT.decode(text)
    return json.loads(text, parse_constant=_refuse_constant)


def text_problem(value: str) -> str | None:
    if "\x00" in value:
        return "contains the NUL character U+0000, which cannot be stored"
    if value.isascii():  # no surrogate, and no need to encode it to know
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate, which is not valid Unicode"
    return None


def storable_text(value: str) -> str:
    """Text as it can be stored: NUL and lone surrogates become U+FFFD (for raw text kept as a
    record, e.g. a model's reply; the judgement of the reply still sees the original)."""
    if text_problem(value) is None:
        return value
    cleaned = value.replace("\x00", "\ufffd")
    return cleaned.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _child(pointer: str, key: object) -> str:
    return f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"


def check_storable(value: Any) -> None:
    """Raise :class:`UnstorableValue` for anything JSONB cannot hold faithfully (traces: any
    finite number is fine there, nothing is hashed)."""
    _walk(value, "", exact_numbers=False)


def hashable(value: Any) -> Any:
    """The value itself, once checked to be storable and hashable exactly: no NUL, no lone
    surrogates, no NaN/Infinity, and every number within ±(2^53-1). Beyond that an integer is
    not exactly a double (RFC 8785 refuses it), and a float such as 1e20 would read back from
    JSONB as an integer that no longer hashes the same; raises :class:`UnstorableValue`."""
    if simple_json(value) is None:  # something is wrong: find where, and say so
        _walk(value, "", exact_numbers=True)
    return value


def simple_json(value: Any) -> bool | None:
    """One quick pass over a value (no JSON pointers built): None if :func:`hashable` would
    refuse it or it holds anything unusual (a tuple, a subclass, a non-string key); else
    whether it is *simple*: only strings, ASCII object keys, arrays, booleans, null,
    integers and non-integral floats of magnitude 1e-4 to 1e16 — what RFC 8785 serializes
    exactly as ``json.dumps`` with sorted keys does."""
    simple = True
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if "\x00" in item or not _encodable(item):
                return None
        elif kind is dict:
            for key, child in item.items():
                if type(key) is not str or "\x00" in key or not _encodable(key):
                    return None
                if not key.isascii():
                    simple = False  # RFC 8785 sorts keys by UTF-16 code units, Python by points
                stack.append(child)
        elif kind is list:
            stack.extend(item)
        elif kind is int:
            if not -MAX_EXACT_INT <= item <= MAX_EXACT_INT:
                return None
        elif kind is bool or item is None:
            pass
        elif kind is float and math.isfinite(item) and abs(item) <= MAX_EXACT_INT:
            # RFC 8785 writes a double as ECMAScript does: the shortest digits that read back
            # to it, in fixed notation for 1e-6 <= |x| < 1e21, "1" for 1.0. Python's repr
            # writes the same shortest digits, in fixed notation for 1e-4 <= |x| < 1e16: in
            # the overlap a non-integral float is written identically by json.dumps.
            if not (1e-4 <= abs(item) < 1e16) or item.is_integer():
                simple = False
        else:
            return None
    return simple


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _walk(value: Any, pointer: str, *, exact_numbers: bool) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        if exact_numbers and not -MAX_EXACT_INT <= value <= MAX_EXACT_INT:
            digits = len(str(abs(value)))
            raise UnstorableValue(pointer, f"{OUT_OF_RANGE} (got an integer of {digits} digits)")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise UnstorableValue(pointer, f"{value} is not a JSON number")
        if exact_numbers and abs(value) > MAX_EXACT_INT:
            raise UnstorableValue(pointer, f"{OUT_OF_RANGE} (got {value!r})")
    elif isinstance(value, str):
        problem = text_problem(value)
        if problem:
            raise UnstorableValue(pointer, problem)
    elif isinstance(value, dict):
        for key, child in value.items():
            if not isinstance(key, str):
                raise UnstorableValue(pointer, f"object key {key!r} is not a string")
            problem = text_problem(key)
            if problem:
                raise UnstorableValue(_child(pointer, key), f"the key {problem}")
            _walk(child, _child(pointer, key), exact_numbers=exact_numbers)
    elif isinstance(value, list | tuple):
        for index, child in enumerate(value):
            _walk(child, _child(pointer, index), exact_numbers=exact_numbers)
    else:
        raise UnstorableValue(pointer, f"{type(value).__name__} is not a JSON value")
