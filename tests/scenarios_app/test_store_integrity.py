"""A self-verifying store: every value the store accepts reads back from PostgreSQL to content
that re-hashes to its key (numbers included), and ``manage.py fsck`` finds rows that do not."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from rest_framework.test import APIClient

from chukwa_core import hashing
from scenarios_app.integrity import store_verify
from scenarios_app.models import Entity, JsonSchema, ResponseSource
from tests.support.worlds import create_world

pytestmark = pytest.mark.django_db

NUMBERS: list[Any] = [
    0,
    -0.0,
    1.0,
    0.1,
    1e-7,
    5e-324,
    123456789.123,
    3.141592653589793,
    9007199254740991,
    -9007199254740991,
    1e15,
    4503599627370495.5,
    2.5e-308,
]


def _fresh(model: type, key: str) -> Any:
    """The stored content as a new query reads it (no cached instance)."""
    return model.objects.values_list("content", flat=True).get(pk=key)


def test_numbers_of_every_form_read_back_to_their_hash(operator_client: APIClient) -> None:
    schema = {"type": "object", "examples": NUMBERS, "properties": {"n": {"maximum": 1e-7}}}
    response = operator_client.post("/api/json-schemas/", {"content": schema}, format="json")
    assert response.status_code == 201, response.json()
    key = response.json()["hash"]
    assert hashing.json_hash(_fresh(JsonSchema, key)) == key
    entity = {
        "id": "dial",
        "name": "Dial",
        "state": "reads 0.1",
        "environment": "room",
        "kind": "prop",
        "extra": NUMBERS,
    }
    response = operator_client.post("/api/entities/", {"content": entity}, format="json")
    if response.status_code == 201:  # entity JSON may refuse unknown fields; the schema suffices
        key = response.json()["hash"]
        assert hashing.json_hash(_fresh(Entity, key)) == key


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"content": {"maximum": 1e21}}', "content/maximum"),
        (b'{"content": {"maximum": 1e400}}', "content/maximum"),
        (b'{"content": {"maximum": 12345678901234567890}}', "content/maximum"),
        (b'{"content": {"const": "a\\u0000b"}}', "content/const"),
        (b'{"content": {"const": "\\ud800"}}', "content/const"),
        (b'{"content": {"a\\u0000": 1}}', "content/a\x00"),
    ],
)
def test_values_that_would_not_read_back_exactly_are_refused(
    operator_client: APIClient, body: bytes, field: str
) -> None:
    response = operator_client.generic(
        "POST", "/api/json-schemas/", body, content_type="application/json"
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    if field == "content/maximum":
        assert (error["code"], error["details"]["field"]) == ("not_canonicalizable", field)
    else:  # NUL and lone surrogates are refused by the request parser, before any hashing
        assert error["code"] == "invalid_character"
    assert not JsonSchema.objects.filter(content__has_key="maximum").exists()
    assert JsonSchema.objects.count() == 1  # only the WorldPatch schema the migration stored


def test_fsck_reports_ok_on_a_clean_store(scripted_llm: Any) -> None:
    create_world("ant_on_plate", "fsck-clean")
    out = StringIO()
    call_command("fsck", stdout=out)
    text = out.getvalue()
    assert "ok:" in text and "every one matches its key" in text
    for kind in ("json_schema", "response_source", "cognition_workflow", "entity", "scenario"):
        assert kind in text
    assert "turn" in text
    assert all(m is None for _, m in store_verify())


def test_fsck_finds_a_tampered_row() -> None:
    create_world("ant_on_plate", "fsck-tampered")
    source = ResponseSource.objects.order_by("pk").first()
    assert source is not None
    tampered = dict(source.content, label="tampered")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {ResponseSource._meta.db_table} SET content = %s::jsonb WHERE hash = %s",  # noqa: S608
            [json.dumps(tampered), source.pk],
        )
    out = StringIO()
    with pytest.raises(CommandError) as excinfo:
        call_command("fsck", stdout=out)
    assert "1 of" in str(excinfo.value)
    assert f"MISMATCH response_source {source.pk}" in out.getvalue()
    assert hashing.json_hash(tampered) in out.getvalue()
