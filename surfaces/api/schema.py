"""The OpenAPI document (``GET /api/schema/``), generated once per process.

drf-spectacular's view walks every view and serializer on each request (hundreds of
milliseconds of CPU, taken from every other request of a busy web process). The API cannot
change while a process runs, and the document is the public one (the same for every user), so
it is generated once per API version and language and served from memory after that.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from django.utils import translation
from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response


class CachedSchemaView(SpectacularAPIView):
    _documents: ClassVar[dict[tuple[str | None, str | None], Any]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def _get_schema_response(self, request: Request) -> Response:
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (version, translation.get_language())
        with self._lock:  # one generation per key, even when the first requests race
            document = self._documents.get(key)
            if document is None:
                generator = self.generator_class(
                    urlconf=self.urlconf, api_version=version, patterns=self.patterns
                )
                document = generator.get_schema(request=request, public=self.serve_public)
                self._documents[key] = document
        filename = self._get_filename(request, version)
        return Response(
            data=document, headers={"Content-Disposition": f'inline; filename="{filename}"'}
        )
