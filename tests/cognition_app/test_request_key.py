"""A request key is sha256 of the canonical JSON of the source hash and the request; a
generation hashes the very bytes it sends (``request_key_of``), and other calls hash their request
(``request_key``): both give that key, whatever the request holds."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chukwa_core.hashing import canonical_json_bytes, json_hash
from cognition_app.sources.replay import request_key, request_key_of


def _defined_key(source_hash: str, payload: dict[str, Any]) -> str:
    return json_hash({"source_hash": source_hash, "request": payload})


_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-9e15, max_value=9e15)
    | st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00")),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(
                st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=6
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=16,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.text(max_size=8).filter(lambda k: "\x00" not in k), _VALUES, max_size=6),
    st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
)
def test_the_key_of_the_sent_bytes_is_the_key_of_the_payload(
    payload: dict[str, Any], source_hash: str
) -> None:
    key = _defined_key(source_hash, payload)
    assert request_key_of(source_hash, canonical_json_bytes(payload)) == key
    assert request_key(source_hash, payload) == key


def test_a_payload_outside_the_fast_path_gets_the_same_key() -> None:
    payload = {
        "model": "m",
        "temperature": 1e-7,  # RFC 8785 writes 1e-7, Python 1e-07: the rfc8785 library's path
        "messages": [{"role": "user", "content": "é 😀"}],
        "ключ": 1.0,  # a non-ASCII key: sorted by UTF-16 code units
        "\U0001f600": 2,
        "\uffff": 3,
    }
    key = _defined_key("ab" * 32, payload)
    assert request_key_of("ab" * 32, canonical_json_bytes(payload)) == key
    assert request_key("ab" * 32, payload) == key
