"""Output serializers applied to the selectors' dicts at the cost of a plain loop.

``represent(OutputSerializer, data)`` equals ``OutputSerializer(data).data`` (the tests compare
them on every read the API serves this way). DRF spends most of a large read's CPU in its own
machinery rather than in the fields: each serializer instance deep-copies (re-creates) every
declared field, nested serializers included, and each value goes through ``get_attribute``'s
generic lookup (ABC ``Mapping`` checks, callable checks) and a generator of readable fields. Here
each serializer class is bound once per process and compiled into a list of steps: a value is read
with ``row[key]`` and converted by the field's own ``to_representation``; a nested serializer or a
``many=True`` list of one is compiled the same way. Whatever does not fit the plain case (a value
that is missing or callable, a row that is not a dict, a field or serializer overriding how it
reads or represents) goes through DRF's own code for that value, so the result is the same.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from rest_framework import fields as drf_fields
from rest_framework import serializers
from rest_framework.relations import PKOnlyObject

Convert = Callable[[Any], Any]


def represent(serializer_class: type[serializers.Serializer], data: Any) -> Any:
    """``serializer_class(data).data``, computed faster (see the module's docstring)."""
    return _compiled(serializer_class)(data)


@functools.cache
def _compiled(serializer_class: type[serializers.Serializer]) -> Convert:
    return _plan(serializer_class())


def _plan(serializer: serializers.Serializer) -> Convert:
    """The steps of ``serializer.to_representation`` for a dict, built once."""
    if type(serializer).to_representation is not serializers.Serializer.to_representation:
        return serializer.to_representation
    steps = []
    for field in serializer._readable_fields:
        plain_read = (
            type(field).get_attribute is drf_fields.Field.get_attribute
            and len(field.source_attrs) == 1
        )
        key = field.source_attrs[0] if plain_read else None
        steps.append((field.field_name, key, field, _converter(field)))

    def run(row: Any) -> Any:
        if type(row) is not dict:
            return serializer.to_representation(row)
        out = {}
        for name, key, field, convert in steps:
            if key is not None and key in row and not callable(value := row[key]):
                out[name] = None if value is None else convert(value)
                continue
            try:
                attribute = field.get_attribute(row)
            except drf_fields.SkipField:
                continue
            none = (attribute.pk if isinstance(attribute, PKOnlyObject) else attribute) is None
            out[name] = None if none else convert(attribute)
        return out

    return run


def _converter(field: drf_fields.Field) -> Convert:
    if isinstance(field, serializers.ListSerializer) and isinstance(
        field.child, serializers.Serializer
    ):
        if type(field).to_representation is not serializers.ListSerializer.to_representation:
            return field.to_representation
        child = _plan(field.child)

        def each(value: Any) -> Any:
            if type(value) is not list:  # querysets and managers: DRF's own handling
                return field.to_representation(value)
            return [child(item) for item in value]

        return each
    if isinstance(field, serializers.Serializer):
        return _plan(field)
    return field.to_representation
