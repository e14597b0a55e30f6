"""The OpenAPI document is generated once per process, not on every request."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from surfaces.api.schema import CachedSchemaView

pytestmark = pytest.mark.django_db


def test_the_openapi_document_is_generated_once_and_served_from_memory(
    reader_client: APIClient, operator_client: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CachedSchemaView, "_documents", {})
    monkeypatch.setattr(CachedSchemaView, "_rendered", {})
    generated: list[Any] = []
    original = CachedSchemaView.generator_class.get_schema

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        document = original(self, *args, **kwargs)
        generated.append(document)
        return document

    monkeypatch.setattr(CachedSchemaView.generator_class, "get_schema", counting)
    first = reader_client.get("/api/schema/?format=json")
    again = operator_client.get("/api/schema/?format=json")
    as_yaml = reader_client.get("/api/schema/")
    yaml_again = operator_client.get("/api/schema/")
    assert [r.status_code for r in (first, again, as_yaml, yaml_again)] == [200] * 4
    assert first["Content-Type"].startswith("application/vnd.oai.openapi+json")
    assert as_yaml["Content-Type"].startswith("application/vnd.oai.openapi")
    assert as_yaml.content == yaml_again.content
    assert len(generated) == 1
    assert json.loads(first.content) == json.loads(again.content)
    assert "/api/worlds/" in json.loads(first.content)["paths"]
    assert b"/api/worlds/:" in as_yaml.content  # every format from the one document


def test_the_document_still_needs_a_signed_in_user() -> None:
    assert APIClient().get("/api/schema/?format=json").status_code in (401, 403)
