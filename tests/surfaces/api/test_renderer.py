"""The API's JSON renderer (surfaces/api/renderers.py) writes DRF's text with orjson, and hands
DRF's renderer what orjson refuses; ``json`` values read by psycopg go through ``loads_strict``
(scenarios_app/sql_rows.py ``register_json_loader``)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.utils.safestring import mark_safe
from rest_framework.renderers import JSONRenderer

from scenarios_app.sql_rows import fetch_dict
from surfaces.api.renderers import FastJSONRenderer


@dataclasses.dataclass
class Point:
    x: int
    y: int


SAME_TEXT: list[Any] = [
    {"a": 1, "b": [True, False, None], "c": "é ü 中 🐜", "d": {"nested": [1, 2, {"e": ""}]}},
    {"when": datetime(2026, 11, 26, 21, 30, 5, 123456, tzinfo=UTC)},
    {"when": datetime(2026, 11, 26, 21, 30, tzinfo=timezone(timedelta(hours=2)))},
    {"naive": datetime(2026, 1, 2, 3, 4, 5), "day": date(2026, 1, 2), "at": time(3, 4, 5)},
    {"cost": Decimal("0.000123"), "id": uuid.UUID("12345678-1234-5678-1234-567812345678")},
    {"lines": "a\u2028b\u2029c", "quote": '"\\/\b\f\n\r\t\x00\x1f\x7f'},
    {"safe": mark_safe("<b>"), "tuple": (1, 2), "float": 0.1, "big": 2**63 - 1, "neg": -(2**63)},
    {"point": Point(1, 2)},
    {"span": timedelta(seconds=90), "empty": {}, "list": []},
    [1, "two", 3.5],
]


@pytest.mark.parametrize("data", SAME_TEXT)
def test_the_text_is_drfs(data: Any) -> None:
    if isinstance(data, dict) and "point" in data:
        # json has no encoding of its own for a dataclass; DRF's encoder is asked (and makes a
        # dict of nothing it can iterate): both renderers refuse it the same way
        with pytest.raises(TypeError):
            JSONRenderer().render(data)
        with pytest.raises(TypeError):
            FastJSONRenderer().render(data)
        return
    assert FastJSONRenderer().render(data) == JSONRenderer().render(data)


@pytest.mark.parametrize(
    "data",
    [
        {"huge": 2**64},  # beyond 64 bits: orjson refuses, json writes it
        {1: "int key", None: "null key"},  # keys json makes strings of
    ],
)
def test_what_orjson_refuses_drf_writes(data: Any) -> None:
    assert FastJSONRenderer().render(data) == JSONRenderer().render(data)


def test_an_exponent_is_the_same_number() -> None:
    data = {"small": 1e-7, "large": 1e22, "tiny": 5e-324}
    assert json.loads(FastJSONRenderer().render(data)) == data


def test_indented_answers_and_none_are_drfs() -> None:
    data = {"a": [1, {"b": 2}]}
    accepted = "application/json; indent=2"
    indented = FastJSONRenderer().render(data, accepted, {})
    assert indented == JSONRenderer().render(data, accepted, {})
    assert b"\n  " in indented
    assert FastJSONRenderer().render(None) == b""


@pytest.mark.django_db
def test_json_values_are_read_exactly() -> None:
    row = fetch_dict(
        'SELECT \'[12345678901234567890123, 0.1, {"k": "é"}]\'::json AS v, '
        "'{\"k\": 1}'::jsonb AS b",
        [],
    )
    assert row is not None
    assert row["v"] == [12345678901234567890123, 0.1, {"k": "é"}]
    assert type(row["v"][0]) is int
    assert row["b"] == '{"k": 1}'  # jsonb is Django's: text, for its JSONField to read
    with connection.cursor() as cursor:
        cursor.execute("SELECT '{\"a\": [1, 2]}'::json")
        assert cursor.fetchone()[0] == {"a": [1, 2]}
