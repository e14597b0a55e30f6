"""JSON parsing for the API: DRF's parser, plus a clear error for absurdly deep nesting."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class ChukwaJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            # Python's json module recurses per nesting level; DRF only catches ValueError.
            raise ParseError("JSON parse error - nested too deeply") from None
