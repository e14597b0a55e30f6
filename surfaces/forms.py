"""Admin forms for the scenario store.

The forms only turn text into values (JSON parsing, blanks, browser newlines); every rule about the
content itself is the services' job, so the admin shows the same errors as the API and the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from chukwa_core.errors import ChukwaError
from scenarios_app.services import UNSET


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON (and the API's parser) does not.
    raise ValueError(f"{name} is not valid JSON")


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


class JsonTextarea(forms.Textarea):
    def __init__(self, rows: int = 24) -> None:
        super().__init__(
            attrs={"class": "chukwa-json", "rows": rows, "cols": 100, "spellcheck": "false"}
        )


class JsonTextField(forms.CharField):
    """JSON typed into a textarea.

    Initial values are shown pretty-printed (indent 2). A bound form re-renders exactly what the
    operator typed, so a service error never reformats their text. ``{}``, ``[]`` and ``""`` are
    values here, not blanks: only whitespace counts as "not given".
    """

    def __init__(self, *, rows: int = 24, **kwargs: Any) -> None:
        super().__init__(strip=False, widget=JsonTextarea(rows=rows), **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        return pretty_json(value)

    def clean(self, value: Any) -> Any:
        text = "" if value is None else str(value)
        if not text.strip():
            if self.required:
                raise ValidationError(self.error_messages["required"], code="required")
            return None
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            raise ValidationError(
                "Malformed JSON: %(error)s", code="malformed_json", params={"error": str(exc)}
            ) from None
        except RecursionError:
            raise ValidationError(
                "Malformed JSON: nested too deeply", code="malformed_json"
            ) from None


class EnvironmentTextField(forms.CharField):
    """Environment prose, hashed as typed (no trimming), except for the browser's newlines."""

    def __init__(self, **kwargs: Any) -> None:
        # Not required: an empty text reaches the service, which reports it like the API does.
        super().__init__(
            strip=False,
            required=False,
            widget=forms.Textarea(attrs={"class": "chukwa-text", "rows": 16, "cols": 100}),
            **kwargs,
        )

    def to_python(self, value: Any) -> str:
        text = super().to_python(value) or ""
        # Browsers submit every textarea newline as CRLF (HTML form submission rules), so without
        # this the same prose would hash differently when typed in the admin and sent to the API.
        return text.replace("\r\n", "\n")


class ComponentJsonForm(forms.Form):
    content = JsonTextField()


class EnvironmentForm(forms.Form):
    content = EnvironmentTextField()


class AssembleForm(forms.Form):
    data = JsonTextField(  # type: ignore[assignment]  # a field named "data", as the API names it
        label="Assembly input",
        rows=32,
        help_text=(
            "The assembly input: scenario_slug, description, chronon_seconds, "
            'cognition_profiles, environments, entities, each component as {"hash": H} or '
            '{"inline": …}; optional name, operator, note, metadata. Without an operator the '
            "signed-in user is recorded."
        ),
    )


class ForkForm(forms.Form):
    changes = JsonTextField(
        rows=20,
        help_text=(
            "scenario_slug?, description?, chronon_seconds?, cognition_profile_upserts, "
            "cognition_profile_removals, environment_upserts, environment_removals, entities? "
            "(replaces the whole list)."
        ),
    )
    additional_parents = JsonTextField(
        required=False,
        rows=4,
        help_text='Optional: [{"hash": H, "role": "merged_from"}, …].',
    )
    name = forms.CharField(
        required=False, max_length=64, help_text="Optional: point this name at the result."
    )
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 100}))


class NameSetForm(forms.Form):
    name = forms.CharField(max_length=64)
    scenario_hash = forms.CharField(label="Scenario hash", max_length=64)
    expected_current_hash = forms.CharField(
        required=False,
        max_length=64,
        help_text="Compare-and-set: only move the name if it points to this hash now.",
    )
    expect_unset = forms.BooleanField(
        required=False,
        label="Only if the name is unset",
        help_text="Compare-and-set against “no current hash”.",
    )
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 100}))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("expected_current_hash") and cleaned.get("expect_unset"):
            raise ValidationError(
                "Give an expected current hash or tick “only if the name is unset”, not both."
            )
        return cleaned

    def expected(self) -> Any:
        """UNSET (no check), None (expect no current hash) or the expected hash."""
        if self.cleaned_data.get("expect_unset"):
            return None
        return self.cleaned_data.get("expected_current_hash") or UNSET


class NameUnsetForm(forms.Form):
    expected_current_hash = forms.CharField(
        required=False,
        max_length=64,
        help_text="Compare-and-set: only unset if the name points to this hash now. Blank: no check.",
    )
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 100}))

    def expected(self) -> Any:
        return self.cleaned_data.get("expected_current_hash") or UNSET


def add_service_error(
    form: forms.Form,
    error: ChukwaError,
    fields: Mapping[str, str],
    *,
    default: str | None = None,
) -> None:
    """Show a service error on the form field its ``details["field"]`` path starts with.

    ``fields`` maps a service field path prefix to a form field; a path no prefix matches goes
    to ``default`` (None: the form's non-field errors).
    """
    path = str(error.details.get("field", ""))
    target = default
    for prefix, form_field in fields.items():
        if path == prefix or path.startswith((f"{prefix}.", f"{prefix}[", f"{prefix}/")):
            target = form_field
            break
    form.add_error(target, ValidationError(f"{error.message} [{error.code}]", code=error.code))
