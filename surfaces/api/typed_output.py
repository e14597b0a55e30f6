"""Output serializers derived from frozen dataclasses (an output is a typed value that the API,
the pages and the CLI all read): each dataclass becomes a serializer with a named component in the OpenAPI document, each field typed from its annotation, its description from
``metadata["help"]``. The dataclass is then the one declaration of an output's shape; the
serializer cannot drift from it.

Only the types an output uses are mapped; any other annotation is a programming error, raised
when the serializer is built (at import), never rendered as an untyped ``object``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

from rest_framework import serializers

from chukwa_core.ids import TextFormat
from surfaces.api.contract import HashOutField, LabelOutField

_TEXT_FIELDS: dict[TextFormat, type[serializers.CharField]] = {
    TextFormat.LABEL: LabelOutField,
    TextFormat.HASH: HashOutField,
}


def _is_dataclass_type(value: Any) -> bool:
    return isinstance(value, type) and dataclasses.is_dataclass(value)


def _field(annotation: Any, *, prefix: str, **kwargs: Any) -> serializers.Field:
    """The serializer field of one annotation (``kwargs``: help_text, allow_null, many…)."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType) and type(None) in arguments:
        (inner,) = [a for a in arguments if a is not type(None)]
        return _field(inner, prefix=prefix, allow_null=True, **kwargs)
    if origin is typing.Annotated:
        base, *extras = arguments
        formats = [e for e in extras if isinstance(e, TextFormat)]
        if base is str and len(formats) == 1:
            return _TEXT_FIELDS[formats[0]](**kwargs)
        raise TypeError(f"no output field for {annotation!r}")
    if origin in (tuple, list):
        child = arguments[0]
        if origin is tuple and (len(arguments) != 2 or arguments[1] is not Ellipsis):
            raise TypeError(f"only tuple[X, ...] is an output list, got {annotation!r}")
        if _is_dataclass_type(child):
            return output_serializer(child, prefix=prefix)(many=True, **kwargs)
        return serializers.ListField(child=_field(child, prefix=prefix), **kwargs)
    if _is_dataclass_type(annotation):
        return output_serializer(annotation, prefix=prefix)(**kwargs)
    # bool before int: a bool is an int to Python, not to JSON
    for python_type, field_class in (
        (bool, serializers.BooleanField),
        (int, serializers.IntegerField),
        (float, serializers.FloatField),
        (str, serializers.CharField),
    ):
        if annotation is python_type:
            return field_class(**kwargs)
    raise TypeError(f"no output field for {annotation!r}")


@functools.cache
def output_serializer(cls: type, *, prefix: str = "") -> type[serializers.Serializer]:
    """The serializer of the dataclass ``cls``; its component (and every nested one) is named
    ``prefix`` + the class's name, unless the name already starts with ``prefix``."""
    if not _is_dataclass_type(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: dict[str, Any] = {}
    for item in dataclasses.fields(cls):
        extra = {"help_text": item.metadata["help"]} if "help" in item.metadata else {}
        fields[item.name] = _field(hints[item.name], prefix=prefix, **extra)
    name = cls.__name__ if cls.__name__.startswith(prefix) else prefix + cls.__name__
    meta = type("Meta", (), {"ref_name": name})
    attributes = {**fields, "Meta": meta, "__doc__": cls.__doc__, "__module__": __name__}
    return type(f"{name}Serializer", (serializers.Serializer,), attributes)
