"""JSON rendering for the API: DRF's renderer, encoding with orjson.

Encoding the answer was the biggest single item of a web process's busy time under 20 API
clients (13% of it in ``json``'s C encoder, sampled with py-spy); orjson writes the same values
several times faster. The text is DRF's (compact, UTF-8, U+2028 and U+2029 escaped, datetimes,
decimals and anything else orjson does not know through DRF's own encoder), except that an
exponent is written without a leading zero (``1e-7`` where ``json`` writes ``1e-07``: the same
number). What orjson refuses (an integer beyond 64 bits, a key that is not a string, a value no
encoder knows) is rendered by DRF's renderer, which writes it or raises its own error, as
before. An indented answer (``; indent=`` in Accept) is DRF's as well. One difference: orjson
writes a NaN or infinite float as null where DRF's strict renderer raises; no value an answer
is made of can be one (JSONB holds none, and the only float column, an annotation's number, is
refused non-finite on the way in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from rest_framework.renderers import JSONRenderer

# DRF's encoder formats datetimes itself ("Z" for UTC): orjson hands them to it, and dataclasses
# too (json has no encoding of its own for them).
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_LINE_SEPARATOR = "\u2028".encode()
_PARAGRAPH_SEPARATOR = "\u2029".encode()


class FastJSONRenderer(JSONRenderer):
    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        if data is None:
            return b""
        if (
            self.ensure_ascii
            or not self.compact
            or not self.strict
            or self.get_indent(accepted_media_type or "", renderer_context or {}) is not None
        ):
            return bytes(super().render(data, accepted_media_type, renderer_context))
        try:
            text = orjson.dumps(data, default=self.encoder_class().default, option=_OPTIONS)
        except orjson.JSONEncodeError:
            return bytes(super().render(data, accepted_media_type, renderer_context))
        # As DRF does: these two are valid JSON but end a line in JavaScript.
        if _LINE_SEPARATOR in text:
            text = text.replace(_LINE_SEPARATOR, b"\\u2028")
        if _PARAGRAPH_SEPARATOR in text:
            text = text.replace(_PARAGRAPH_SEPARATOR, b"\\u2029")
        return text
