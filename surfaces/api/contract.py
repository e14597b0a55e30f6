"""The typed API boundary: the fields, the error envelope and the body validation every view uses.

The serializers built from these pieces both validate request bodies and generate the OpenAPI
document, so the document describes what the API accepts. A serializer checks the shape of a
body (an object, its required and unknown fields, the JSON type of each field); where a service
already names a precise error code for a field (``invalid_count``, ``invalid_slug``…), the
serializer reports a failure of that field under the same code, and the domain rules (label
grammar of nested keys, references, sizes, characters PostgreSQL cannot hold) stay in the
service, which is the one validator the admin, the CLI and MCP share.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

from django.core.validators import ProhibitNullCharactersValidator
from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from chukwa_core.component_validation import type_name
from chukwa_core.errors import ChukwaError, invalid
from chukwa_core.ids import HASH_PATTERN, is_hash, label_problem
from scenarios_app.selectors import DEFAULT_LIMIT, MAX_LIMIT
from surfaces.api.errors import _flatten_drf_detail
from surfaces.permissions import with_default_operator

# The label grammar written without alternation, so generators and validators that
# anchor differently agree on it.
LABEL_PATTERN = r"^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$"
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
MAX_OFFSET = 1_000_000_000
MAX_TURN_NUMBER = 2_147_483_647

HASH_SCHEMA: dict[str, Any] = {"type": "string", "pattern": HASH_PATTERN}
LABEL_SCHEMA: dict[str, Any] = {"type": "string", "pattern": LABEL_PATTERN}


def one_key_of(**alternatives: dict[str, Any]) -> dict[str, Any]:
    """An object of exactly one of the keys, each with its own schema (``{"hash": H}`` or
    ``{"label": L}``...)."""
    return {
        "oneOf": [
            {
                "type": "object",
                "properties": {key: schema},
                "required": [key],
                "additionalProperties": False,
            }
            for key, schema in alternatives.items()
        ]
    }


# a stored component by hash or by label: ``{"hash": H}`` or ``{"label": L}``
HASH_OR_LABEL_SCHEMA: dict[str, Any] = one_key_of(hash=HASH_SCHEMA, label=LABEL_SCHEMA)


# --- the error envelope -----------------------------------------------------------------------


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. invalid_slug.")
    message = serializers.CharField(help_text="Human-readable; starts with the field it names.")
    details = serializers.DictField(help_text="field, and whatever else the code carries")

    class Meta:
        ref_name = "ErrorBody"


class ErrorSerializer(serializers.Serializer):
    error = ErrorBodySerializer()

    class Meta:
        ref_name = "Error"


_ERROR_MEANINGS = {
    400: "Bad input: the code names the rule, the message starts with the field.",
    401: "Not signed in (no or a bad token).",
    403: "Signed in, but not allowed (writes are for operators).",
    404: "No such thing, or no such path under /api/.",
    409: "Conflicts with the current state (exists, busy, compare-and-set failed).",
    413: "The request body is larger than allowed.",
    415: "The request body is not JSON.",
    429: "Too many failed sign-ins from this client; retry after details.retry_after_seconds.",
    503: "The database or the broker is unavailable; nothing was written; retry shortly.",
}
_READ_ERRORS = (400, 401, 403, 404, 429, 503)
_WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 415, 429, 503)


def errors(*, write: bool = False) -> dict[int, OpenApiResponse]:
    """Every status an operation can answer with besides success, each as the error envelope."""
    return {
        code: OpenApiResponse(ErrorSerializer, description=_ERROR_MEANINGS[code])
        for code in (_WRITE_ERRORS if write else _READ_ERRORS)
    }


READ_ERRORS = errors()
WRITE_ERRORS = errors(write=True)


# --- fields ---------------------------------------------------------------------------------


class StrictCharField(serializers.CharField):
    """A JSON string, exactly: no number or boolean is turned into text, nothing is trimmed.
    U+0000 and lone surrogates are left to the service, which names them invalid_character."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators = [
            v
            for v in self.validators
            if not isinstance(
                v, ProhibitNullCharactersValidator | ProhibitSurrogateCharactersValidator
            )
        ]

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError(f"must be a string, got {type_name(data)}")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, exactly: "3", 3.0 and true are not integers."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError(f"must be an integer, got {type_name(data)}")
        return super().to_internal_value(data)


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JSONObjectField(serializers.JSONField):
    """A JSON object with any members."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError(f"must be an object, got {type_name(data)}")
        return data


class StrictListField(serializers.ListField):
    """A JSON array, exactly: DRF's ListField would also take an object's keys or a string."""

    def to_internal_value(self, data: Any) -> list[Any]:
        if not isinstance(data, list):
            raise serializers.ValidationError(f"must be an array, got {type_name(data)}")
        return super().to_internal_value(data)


class PassThroughField(serializers.JSONField):
    """Any JSON value, handed to the service unchanged: the service validates it and names the
    precise error. Subclasses declare the schema the service enforces."""

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        if data is None:
            # null goes to the service too, which names the field's own error for it.
            return True, None
        return super().validate_empty_values(data)

    def to_internal_value(self, data: Any) -> Any:
        return data


def described(schema: dict[str, Any], **kwargs: Any) -> PassThroughField:
    """A pass-through field documented with ``schema``."""
    field_class = extend_schema_field(schema)(type("Described", (PassThroughField,), {}))
    return field_class(**kwargs)


def hash_or_inline(inline: dict[str, Any]) -> dict[str, Any]:
    """The ``{"hash": H} | {"inline": content}`` reference of a component."""
    return one_key_of(hash=HASH_SCHEMA, inline=inline)


def name_or_hash(*extra: dict[str, Any]) -> dict[str, Any]:
    """A scenario reference: ``{"name": N} | {"hash": H}`` (and any extra alternatives)."""
    return {
        "oneOf": [
            {
                "type": "object",
                "properties": {"name": LABEL_SCHEMA},
                "required": ["name"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"hash": HASH_SCHEMA},
                "required": ["hash"],
                "additionalProperties": False,
            },
            *extra,
        ]
    }


@extend_schema_field(OpenApiTypes.DATETIME)
class InstantField(serializers.DateTimeField):
    """An output instant, left to the JSON renderer so its text is the API's usual one."""

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(HASH_SCHEMA)
class HashOutField(serializers.CharField):
    pass


@extend_schema_field(LABEL_SCHEMA)
class LabelOutField(serializers.CharField):
    pass


# --- body validation ------------------------------------------------------------------------


_INDEX = re.compile(r"\[\d+\]")


# The base of every request body: a JSON object whose unknown fields are an error.
# ``field_codes`` maps a field path (``count``; nested ``a.b``; list items ``a[]``) to the code
# the service uses for that field, so a type error names the same code as a domain error there;
# any other failure is ``invalid_input``. (A comment, not a docstring: the document would give
# it as every body's description.)
class StrictInputSerializer(serializers.Serializer):
    field_codes: ClassVar[Mapping[str, str]] = {}

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError(
                {"non_field_errors": [f"must be a JSON object, got {type_name(data)}"]}
            )
        value = super().to_internal_value(data)
        unknown = sorted(k for k in data if k not in self.fields)
        if unknown:
            allowed = ", ".join(sorted(self.fields))
            raise serializers.ValidationError(
                {key: [f"unknown field; allowed fields are {allowed}"] for key in unknown}
            )
        return value


class InputSerializerExtension(OpenApiSerializerExtension):
    """Bodies reject unknown fields, so their schemas say ``additionalProperties: false``."""

    target_class = StrictInputSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_basic_serializer(self.target, direction)
        return {**schema, "additionalProperties": False}


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer <API token>``: the same tokens as ``Token <API token>``."""

    target_class = "surfaces.signin_throttle.ThrottledBearerAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return build_bearer_security_scheme_object(
            header_name="Authorization",
            token_prefix="Bearer",  # noqa: S106  (a scheme's name, not a secret)
        )


class DeleteBodySchema(AutoSchema):
    """For a view whose DELETE reads a body (a scenario name's compare-and-set unset).
    drf-spectacular describes request bodies of POST, PUT and PATCH only; this describes a
    DELETE's declared body as PUT's would be, so the document (and the MCP tools built from it)
    names every field the view accepts."""

    def _get_request_body(self, direction: str = "request") -> Any:
        if self.method != "DELETE":
            return super()._get_request_body(direction)
        self.method = "PUT"
        try:
            return super()._get_request_body(direction)
        finally:
            self.method = "DELETE"


def validate(serializer_class: type[StrictInputSerializer], data: Any) -> dict[str, Any]:
    """Run ``serializer_class`` on a body; the first failure becomes the API's error."""
    if not isinstance(data, dict):
        # [] or null is a client error, not "no body" (an absent body parses as {}).
        raise invalid("invalid_input", "body", f"must be a JSON object, got {type_name(data)}")
    serializer = serializer_class(data=data)
    if serializer.is_valid():
        return dict(serializer.validated_data)
    pairs = _flatten_drf_detail(serializer.errors)
    field, message = pairs[0] if pairs else ("body", "Invalid input.")
    code = serializer_class.field_codes.get(_INDEX.sub("[]", field), "invalid_input")
    if re.split(r"[.\[]", field, maxsplit=1)[0] not in data:
        # A missing field is a malformed body, whatever code its value's errors have.
        code = "invalid_input"
    if code == "invalid_input":
        raise ChukwaError(
            code,
            f"{field}: {message}",
            {"field": field, "errors": [{"field": f, "message": m} for f, m in pairs]},
        )
    raise invalid(code, field, message)


def validate_body(
    serializer_class: type[StrictInputSerializer], request: Request
) -> dict[str, Any]:
    return validate(serializer_class, request.data)


def operator_of(request: Request, data: dict[str, Any]) -> dict[str, Any]:
    """The validated body with its operator (see ``permissions.with_default_operator``)."""
    result: dict[str, Any] = with_default_operator(data, request.user)
    return result


# --- parameters -----------------------------------------------------------------------------


PAGING = [
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
        description=f"Page size, 1…{MAX_LIMIT}.",
    ),
    OpenApiParameter(
        "offset",
        {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        description="Rows to skip.",
    ),
]


def path_parameter(name: str, schema: dict[str, Any], description: str = "") -> OpenApiParameter:
    return OpenApiParameter(name, schema, OpenApiParameter.PATH, description=description)


HASH_PATH = path_parameter("hash", HASH_SCHEMA, "lowercase sha256 hex")
SLUG_PATH = path_parameter("slug", LABEL_SCHEMA, "world slug")
NAME_PATH = path_parameter("name", LABEL_SCHEMA, "scenario name")
REF_PATH = path_parameter(
    "ref", {"type": "string", "pattern": LABEL_PATTERN}, "a scenario hash or a scenario name"
)
TURN_PATH = path_parameter(
    "number", {"type": "integer", "minimum": 0, "maximum": MAX_TURN_NUMBER}, "turn number"
)


def uuid_path(name: str) -> OpenApiParameter:
    return path_parameter(name, {"type": "string", "format": "uuid", "pattern": UUID_PATTERN})


@extend_schema_field(LABEL_SCHEMA)
class LabelField(StrictCharField):
    """A label: a name, a slug."""

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        problem = label_problem(value)
        if problem is not None:
            shown = repr(value) if len(value) <= 64 else f"{value[:64]!r}…"
            raise serializers.ValidationError(f"{shown} {problem}")
        return value


@extend_schema_field(HASH_SCHEMA)
class HashField(StrictCharField):
    """A lowercase sha256 hex."""

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if not is_hash(value):
            shown = repr(value) if len(value) <= 80 else f"{value[:77]!r}..."
            raise serializers.ValidationError(f"{shown} is not a lowercase sha256 hex")
        return value


@extend_schema_field(OpenApiTypes.DATETIME)
class InstantInField(StrictCharField):
    """An ISO 8601 instant with an offset; the service parses it on the world's calendar."""


# --- cost and budgets ----------------------------------------------------------------


class TokenTotalsSerializer(serializers.Serializer):
    prompt = serializers.IntegerField()
    completion = serializers.IntegerField()
    cached = serializers.IntegerField()
    total = serializers.IntegerField(help_text="prompt + completion")

    class Meta:
        ref_name = "TokenTotals"


class CostTotalsSerializer(serializers.Serializer):
    total = serializers.DecimalField(
        max_digits=30,
        decimal_places=10,
        allow_null=True,
        help_text="sum of the known costs; null (unknown) when no call has a price — never 0",
    )
    unknown_calls = serializers.IntegerField(
        help_text="LLM calls without a cost (no matching price, or no usage), not in total"
    )
    estimated_calls = serializers.IntegerField(help_text="calls costed from estimated usage")
    calls = serializers.IntegerField()
    tokens = TokenTotalsSerializer(help_text="tokens spent (reused calls' are not)")
    calls_reused = serializers.IntegerField(
        help_text="calls answered from a recorded call (reuse): nothing sent, cost 0"
    )
    tokens_reused = serializers.IntegerField(help_text="the reused calls' tokens, not spent")
    cost_saved = serializers.DecimalField(
        max_digits=30,
        decimal_places=10,
        allow_null=True,
        help_text="what the reused calls cost when they were sent; null when one had no price",
    )

    class Meta:
        ref_name = "CostTotals"


def _limit_int(help_text: str) -> StrictIntegerField:
    return StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=2**62, help_text=help_text
    )


def _limit_cost(help_text: str) -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=20,
        decimal_places=10,
        required=False,
        allow_null=True,
        min_value=Decimal("0.0000000001"),
        help_text=help_text,
    )


class BudgetInputSerializer(StrictInputSerializer):
    field_codes = {
        "max_tokens_per_turn": "invalid_budget",
        "max_cost_per_turn": "invalid_budget",
        "max_tokens_total": "invalid_budget",
        "max_cost_total": "invalid_budget",
    }
    max_tokens_per_turn = _limit_int("prompt + completion tokens one attempt may spend")
    max_cost_per_turn = _limit_cost("what one attempt may cost (price table currency)")
    max_tokens_total = _limit_int("prompt + completion tokens the world may spend in all")
    max_cost_total = _limit_cost("what the world may cost in all")

    class Meta:
        ref_name = "BudgetInput"


class BudgetSerializer(serializers.Serializer):
    max_tokens_per_turn = serializers.IntegerField(allow_null=True)
    max_cost_per_turn = serializers.DecimalField(max_digits=20, decimal_places=10, allow_null=True)
    max_tokens_total = serializers.IntegerField(allow_null=True)
    max_cost_total = serializers.DecimalField(max_digits=20, decimal_places=10, allow_null=True)

    class Meta:
        ref_name = "Budget"
