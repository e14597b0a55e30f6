"""Serializers derived from dataclasses: each field typed from its annotation (null where the
type allows it, labels and hashes with their pattern, nested dataclasses as components of their
own), and an annotation with no JSON type refused when the serializer is built, never rendered
as an untyped object."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from rest_framework import serializers

from chukwa_core.ids import Hash, Label
from surfaces.api.contract import HashOutField, LabelOutField
from surfaces.api.typed_output import output_serializer


@dataclass(frozen=True)
class Inner:
    """A nested value."""

    turn: int
    share: float | None = field(metadata={"help": "null: nothing measured"})


@dataclass(frozen=True)
class Outer:
    name: Label
    ref: Hash
    done: bool
    points: tuple[Inner, ...]
    first: Inner | None
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Loose:
    anything: dict[str, Any]


def test_fields_are_typed_from_the_annotations() -> None:
    serializer_class = output_serializer(Outer, prefix="Test")
    assert serializer_class.Meta.ref_name == "TestOuter"
    fields = serializer_class().fields
    assert isinstance(fields["name"], LabelOutField)
    assert isinstance(fields["ref"], HashOutField)
    assert isinstance(fields["done"], serializers.BooleanField)
    points = fields["points"]
    assert isinstance(points, serializers.ListSerializer)
    assert points.child.Meta.ref_name == "TestInner"
    assert fields["first"].allow_null and not points.allow_null
    share = points.child.fields["share"]
    assert isinstance(share, serializers.FloatField) and share.allow_null
    assert share.help_text == "null: nothing measured"
    assert isinstance(fields["tags"], serializers.ListField)
    # one serializer per dataclass and prefix: a component is declared once
    assert output_serializer(Inner, prefix="Test") is points.child.__class__

    value = Outer("a", "0" * 64, True, (Inner(1, None), Inner(2, 0.5)), None, ("x",))
    assert serializer_class(value).data == {
        "name": "a",
        "ref": "0" * 64,
        "done": True,
        "points": [{"turn": 1, "share": None}, {"turn": 2, "share": 0.5}],
        "first": None,
        "tags": ["x"],
    }


def test_an_annotation_without_a_json_type_is_refused() -> None:
    with pytest.raises(TypeError, match="no output field"):
        output_serializer(Loose)
    with pytest.raises(TypeError, match="not a dataclass"):
        output_serializer(dict)
