"""The OpenAPI document (``GET /api/schema/``), generated and rendered once per process.

drf-spectacular's view walks every view and serializer on each request, then renders the
document as YAML or JSON (hundreds of milliseconds of CPU, taken from every other request of a
busy web process). The API cannot change while a process runs, and the document is the public
one (the same for every user), so each API version, language and format is produced once and
served from memory after that.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from django.http import HttpResponse
from django.utils import translation
from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request


class CachedSchemaView(SpectacularAPIView):
    _documents: ClassVar[dict[tuple[Any, ...], Any]] = {}
    _rendered: ClassVar[dict[tuple[Any, ...], str | bytes]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def _get_schema_response(self, request: Request) -> HttpResponse:
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (version, translation.get_language())
        renderer, media_type = request.accepted_renderer, request.accepted_media_type
        rendered_key = (*key, type(renderer), media_type)
        with self._lock:  # one generation per key, even when the first requests race
            body = self._rendered.get(rendered_key)
            if body is None:
                document = self._documents.get(key)
                if document is None:
                    generator = self.generator_class(
                        urlconf=self.urlconf, api_version=version, patterns=self.patterns
                    )
                    document = generator.get_schema(request=request, public=self.serve_public)
                    self._documents[key] = document
                body = renderer.render(document, media_type, self.get_renderer_context())
                self._rendered[rendered_key] = body
        assert body is not None
        content_type = media_type
        if renderer.charset and "charset" not in media_type:
            content_type = f"{media_type}; charset={renderer.charset}"
        response = HttpResponse(body, content_type=content_type)
        response["Content-Disposition"] = (
            f'inline; filename="{self._get_filename(request, version)}"'
        )
        return response
