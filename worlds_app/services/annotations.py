"""Writes for annotations: a reviewer's named score on an attempt, a turn or an LLM call.

Value kinds: an annotation's value is a number, a label or a boolean, and a name's values share
one kind — the kind of the name's existing annotations (so the first one fixes it). Filters and
summaries over a name (``helpfulness`` ≥ 3, ``verdict`` = ``wrong``) then mean one thing. A name
whose annotations are all deleted is free again. Who may change or delete an annotation (its
author or an operator) is the caller's check (``surfaces.permissions``); these services write.
"""

from __future__ import annotations

import math
import uuid
from typing import Any, NotRequired, TypedDict

from django.contrib.auth.models import User
from django.db import connection, transaction

from chukwa_core.component_validation import type_name
from chukwa_core.errors import NotFoundError, invalid
from chukwa_core.ids import label_problem
from cognition_app.models import LlmCall
from worlds_app.models import (
    MAX_ANNOTATION_COMMENT_BYTES,
    Annotation,
    AnnotationTarget,
    AnnotationValueKind,
    Turn,
    TurnAttempt,
)
from worlds_app.selectors import (
    annotation_not_found,
    parse_uuid,
    require_slug,
    require_turn_number,
)

AnnotationValue = float | int | str | bool


class AnnotationInput(TypedDict):
    """What the API's serializer checked the shape of; the service checks it again."""

    target: dict[str, Any]
    name: str
    value: AnnotationValue
    comment: NotRequired[str]


class AnnotationChangeInput(TypedDict):
    name: str
    value: AnnotationValue
    comment: NotRequired[str]


def _resolve_target(target: Any) -> dict[str, Any]:
    """The model fields naming the target; 404 if it does not exist."""
    if not isinstance(target, dict) or len(target) != 1:
        raise invalid(
            "invalid_target",
            "target",
            'must be {"attempt": id} | {"turn": {"world": slug, "number": n}} | {"llm_call": id}',
        )
    ((kind, ref),) = target.items()
    if kind == AnnotationTarget.ATTEMPT:
        pk = parse_uuid(ref, "target.attempt")
        attempt = TurnAttempt.objects.filter(pk=pk).first()
        if attempt is None:
            raise NotFoundError(
                "attempt_not_found", f"target.attempt: no attempt {pk}", {"field": "target.attempt"}
            )
        return {"target_kind": kind, "attempt": attempt}
    if kind == AnnotationTarget.LLM_CALL:
        pk = parse_uuid(ref, "target.llm_call")
        call = LlmCall.objects.filter(pk=pk).first()
        if call is None:
            raise NotFoundError(
                "llm_call_not_found",
                f"target.llm_call: no LLM call {pk}",
                {"field": "target.llm_call"},
            )
        return {"target_kind": kind, "llm_call": call}
    if kind == AnnotationTarget.TURN:
        if not isinstance(ref, dict) or set(ref) != {"world", "number"}:
            raise invalid("invalid_target", "target.turn", 'must be {"world": slug, "number": n}')
        slug, number = ref["world"], ref["number"]
        if not isinstance(slug, str):
            raise invalid(
                "invalid_slug", "target.turn.world", f"must be a string, got {type_name(slug)}"
            )
        if isinstance(number, bool) or not isinstance(number, int):
            raise invalid(
                "invalid_turn", "target.turn.number", f"must be an integer, got {type_name(number)}"
            )
        require_slug(slug, "target.turn.world")
        require_turn_number(number, "target.turn.number")
        turn = Turn.objects.filter(world__slug=slug, number=number).first()
        if turn is None:
            raise NotFoundError(
                "turn_not_found",
                f"target.turn: world {slug!r} has no committed turn {number}",
                {"field": "target.turn"},
            )
        return {"target_kind": kind, "turn": turn}
    raise invalid(
        "invalid_target", "target", f"unknown target kind {kind!r}; known: attempt, turn, llm_call"
    )


def _value_fields(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"value_kind": AnnotationValueKind.BOOLEAN, "value_boolean": value}
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise invalid("invalid_value", "value", "a number must be finite and fit a double")
        return {"value_kind": AnnotationValueKind.NUMBER, "value_number": number}
    if isinstance(value, str):
        problem = label_problem(value)
        if problem is not None:
            shown = repr(value) if len(value) <= 64 else f"{value[:64]!r}…"
            raise invalid("invalid_value", "value", f"a label value: {shown} {problem}")
        return {"value_kind": AnnotationValueKind.LABEL, "value_label": value}
    raise invalid(
        "invalid_value", "value", f"must be a number, a label or a boolean, got {type_name(value)}"
    )


def _name(name: Any) -> str:
    if not isinstance(name, str):
        raise invalid("invalid_name", "name", f"must be a string, got {type_name(name)}")
    problem = label_problem(name)
    if problem is not None:
        shown = repr(name) if len(name) <= 64 else f"{name[:64]!r}…"
        raise invalid("invalid_name", "name", f"{shown} {problem}")
    return name


def _comment(comment: Any) -> str:
    if not isinstance(comment, str):
        raise invalid("invalid_comment", "comment", f"must be a string, got {type_name(comment)}")
    if "\x00" in comment:
        raise invalid("invalid_character", "comment", "contains U+0000, which cannot be stored")
    try:
        size = len(comment.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise invalid(
            "invalid_character", "comment", f"contains a lone surrogate at position {exc.start}"
        ) from None
    if size > MAX_ANNOTATION_COMMENT_BYTES:
        raise invalid(
            "comment_too_large",
            "comment",
            f"is {size} bytes of UTF-8; at most {MAX_ANNOTATION_COMMENT_BYTES} are allowed",
        )
    return comment


def _lock_name_kind(name: str, kind: str, *, exclude: uuid.UUID | None = None) -> None:
    """Raise unless ``kind`` is the kind of the name's other annotations. The transaction-scoped
    advisory lock on the name serializes writers of one name, so two first annotations of
    different kinds cannot both pass the check."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"annotation:{name}"])
    others = Annotation.objects.filter(name=name)
    if exclude is not None:
        others = others.exclude(pk=exclude)
    existing = others.values_list("value_kind", flat=True).first()
    if existing is not None and existing != kind:
        raise invalid(
            "invalid_value",
            "value",
            f"annotations named {name!r} hold {existing} values; got a {kind}",
            expected_kind=existing,
        )


def annotation_create(*, data: AnnotationInput, author: User) -> Annotation:
    target = _resolve_target(data.get("target"))
    name = _name(data.get("name"))
    if "value" not in data:
        raise invalid("invalid_value", "value", "is required")
    values = _value_fields(data["value"])
    comment = _comment(data.get("comment", ""))
    with transaction.atomic(durable=True):
        _lock_name_kind(name, values["value_kind"])
        return Annotation.objects.create(
            **target, **values, name=name, comment=comment, author=author
        )


def annotation_update(*, annotation_id: uuid.UUID, data: AnnotationChangeInput) -> Annotation:
    """Replace the name, value and comment (the target and author stay)."""
    name = _name(data.get("name"))
    if "value" not in data:
        raise invalid("invalid_value", "value", "is required")
    values = _value_fields(data["value"])
    comment = _comment(data.get("comment", ""))
    with transaction.atomic(durable=True):
        annotation = Annotation.objects.select_for_update().filter(pk=annotation_id).first()
        if annotation is None:
            raise annotation_not_found(annotation_id)
        _lock_name_kind(name, values["value_kind"], exclude=annotation.pk)
        annotation.name = name
        annotation.comment = comment
        annotation.value_number = None
        annotation.value_label = ""
        annotation.value_boolean = None
        for field, value in values.items():
            setattr(annotation, field, value)
        annotation.save()
    return annotation


def annotation_delete(*, annotation_id: uuid.UUID) -> None:
    with transaction.atomic(durable=True):
        deleted, _ = Annotation.objects.filter(pk=annotation_id).delete()
    if not deleted:
        raise annotation_not_found(annotation_id)
