"""Pages that update themselves while what they show still runs.

They poll with HTMX and their answer is morphed into the page (idiomorph, static/chukwa/live.js),
so what the reviewer opened or selected stays as it was. A page whose subject has finished
answers a poll with HTTP 286: HTMX swaps that last answer in and stops polling. (A morph keeps
the polling element itself, so removing ``hx-trigger`` from the answer would not stop it.)
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

STOP_POLLING = 286


def stop_polling_when(response: HttpResponse, request: HttpRequest, finished: bool) -> None:
    if finished and getattr(request, "htmx", False) and response.status_code == 200:
        response.status_code = STOP_POLLING
