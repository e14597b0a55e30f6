"""Query strings validated by serializers: one serializer per index both checks a request's
filters (API and page alike) and describes them in the OpenAPI document, so the document lists
exactly the filters that are accepted.

An empty value (``?status=``, as a filter form sends for a field left blank) means no filter;
an unknown key is an error, as in the other lists; the first failure is a 400 ``invalid_query``
naming its field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from chukwa_core import clock
from chukwa_core.errors import invalid
from scenarios_app.selectors import DEFAULT_LIMIT, MAX_LIMIT
from surfaces.api.contract import MAX_OFFSET
from surfaces.api.errors import _flatten_drf_detail

# Keys every page and endpoint tolerates besides its filters: the page's (and DRF's) format.
ALWAYS_ALLOWED = ("format",)


@extend_schema_field(OpenApiTypes.DATETIME)
class InstantQueryField(serializers.Field):
    """An ISO 8601 instant with an offset (``2030-01-01T09:00:00Z``), in UTC."""

    def to_internal_value(self, data: Any) -> datetime:
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string")
        raw = data.strip()
        try:
            return clock.parse_instant(raw)
        except (clock.NotAnInstant, clock.CalendarOverflow) as exc:
            shown = raw if len(raw) <= 64 else raw[:64] + "…"
            raise serializers.ValidationError(f"{exc}, got {shown!r}") from None


def text_filter(help_text: str) -> serializers.CharField:
    """A free-text equality filter; NUL and lone surrogates are refused by DRF's validators."""
    return serializers.CharField(required=False, max_length=200, help_text=help_text)


class PagingQuerySerializer(serializers.Serializer):
    limit = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_LIMIT,
        default=DEFAULT_LIMIT,
        help_text=f"Page size, 1…{MAX_LIMIT}.",
    )
    offset = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_OFFSET, default=0, help_text="Rows to skip."
    )


# The most events one answer of an attempt gives when the client asks for a window of them.
MAX_EVENTS_LIMIT = 5000


class AttemptEventsQuerySerializer(serializers.Serializer):
    events_after = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=2**31 - 1,
        help_text="only the events numbered above this (a client following a running attempt)",
    )
    events_limit = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_EVENTS_LIMIT,
        help_text=f"at most this many events, 1…{MAX_EVENTS_LIMIT} (default: all of them); "
        "events_next_after says where the next window starts",
    )


class SinceUntilMixin(serializers.Serializer):
    since = InstantQueryField(required=False, help_text="at or after this instant")
    until = InstantQueryField(required=False, help_text="before this instant")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "since" in attrs and "until" in attrs and attrs["until"] <= attrs["since"]:
            raise serializers.ValidationError({"until": ["must be later than since"]})
        return attrs


def parse_query(
    serializer_class: type[serializers.Serializer],
    params: Mapping[str, Any],
    *,
    others_allowed: bool = False,
) -> dict[str, Any]:
    """The validated filters (blank ones left out) and paging of a query string. Other keys are
    an error, unless ``others_allowed`` (an endpoint that took no query string before, whose
    clients may send anything: its own keys are checked, the rest ignored as before)."""
    data = {k: params.get(k) for k in params if params.get(k) not in (None, "")}
    fields = serializer_class().fields
    if others_allowed:
        data = {k: v for k, v in data.items() if k in fields}
    serializer = serializer_class(data=data)
    unknown = sorted(k for k in data if k not in fields and k not in ALWAYS_ALLOWED)
    if unknown:
        raise invalid("invalid_query", unknown[0], f"unknown filter; known: {', '.join(fields)}")
    if not serializer.is_valid():
        field, message = _flatten_drf_detail(serializer.errors)[0]
        if field == "body":
            field = "query"
        raise invalid("invalid_query", field, message)
    return dict(serializer.validated_data)


def split_paging(query: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """(filters, limit, offset) from a parsed query."""
    filters = {k: v for k, v in query.items() if k not in ("limit", "offset")}
    return filters, query.get("limit", DEFAULT_LIMIT), query.get("offset", 0)
