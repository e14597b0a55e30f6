"""``loads_strict`` reads with orjson first and json where orjson would differ: its value and its
error are always those of ``json.loads`` without NaN / Infinity."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chukwa_core.json_values import loads_strict


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _reference(text: str) -> tuple[str, Any]:
    try:
        return "value", json.loads(text, parse_constant=_refuse)
    except (ValueError, RecursionError) as exc:
        return "error", str(exc)


def _ours(text: str) -> tuple[str, Any]:
    try:
        return "value", loads_strict(text)
    except (ValueError, RecursionError) as exc:
        return "error", str(exc)


def _same(text: str) -> None:
    ours, reference = _ours(text), _reference(text)
    # repr tells 1 from 1.0 and True, -0.0 from 0.0, and shows a lone surrogate
    assert (ours[0], repr(ours[1])) == (reference[0], repr(reference[1])), text


@pytest.mark.parametrize(
    "text",
    [
        "123456789012345678901234567890",  # orjson: a float
        "-9223372036854775809",
        "18446744073709551616",
        "18446744073709551615",
        "[1, 12345678901234567890123]",
        '{"n": 99999999999999999999}',
        "1e400",  # json: inf; orjson refuses
        "-1e400",
        "1.7976931348623157e309",
        "4.9e-324",
        "2.5e-324",
        "-0",
        "-0.0",
        "1.0",
        '"\\ud800"',  # a lone surrogate escape: json reads it, orjson refuses
        '"\\udc00 and \\ud83d\\ude00"',
        '{"a": 1, "a": 2}',
        "\ufeff1",
        "NaN",
        "[Infinity]",
        "-Infinity",
        "[1,]",
        "tru",
        "",
        " [1] ",
        '"a\u2028b\x7f"',
        '"tab\tinside"',
        "[" * 200 + "]" * 200,
        '{"choices": [{"delta": {"content": "{\\"kind\\":"}}], "model": "m"}',
    ],
)
def test_tricky_texts_read_as_json_reads_them(text: str) -> None:
    _same(text)


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(_JSON_VALUES, st.booleans())
def test_any_json_text_reads_as_json_reads_it(value: Any, ascii_only: bool) -> None:
    # an infinity, anywhere, as the number literal that overflows a double
    text = json.dumps(value, ensure_ascii=ascii_only).replace("Infinity", "1e999")
    _same(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('[]{}:,"\\0123456789.eE+-truefalsnu \t\n'))))
def test_any_text_of_json_characters_reads_or_fails_as_json_does(text: str) -> None:
    _same(text)
