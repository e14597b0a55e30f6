"""The client side of a provider's Batch API (OpenAI's Files and Batches endpoints), for LLM
sources whose interface declares ``batch: {"api": "openai", "completion_window": "24h"}``.

A batch is submitted in two requests (``POST /files`` with the JSONL of ``{custom_id, method,
url, body}`` lines, ``purpose=batch``; ``POST /batches``), polled (``GET /batches/<id>``) and,
once ``completed``, its output and error files are read (``GET /files/<id>/content``): each
line's ``response`` is ``{status_code, body}`` keyed by the ``custom_id`` it was sent with.

A batch that ends ``failed`` or ``expired`` fails every call in it with the failure class
``batch_failed`` or ``batch_expired`` (retried by the source's policy like a transport failure);
``cancelled`` with ``batch_cancelled``. Errors of the exchanges themselves are ``SourceFailure``
of class ``transport`` (no answer) or ``server_error`` (a status other than 200), their messages
never quoting the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from cognition_app.failures import SourceFailure
from cognition_app.sources.variables import key_from_env, url_from_env

CHAT_PATH = "/v1/chat/completions"
# What a batch's status ends as, and the failure class it gives the calls it held.
FAILED_BATCH_CLASSES = {
    "failed": "batch_failed",
    "expired": "batch_expired",
    "cancelled": "batch_cancelled",
}
PENDING_STATUSES = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
# One exchange with the Files/Batches endpoints (not the batch's own completion window).
EXCHANGE_TIMEOUT_S = 60.0
MAX_ERROR_TEXT = 500


@dataclass(frozen=True)
class BatchEndpoint:
    """Where a source's batches go: its base URL (ending ``/v1`` as the chat calls') and key."""

    base_url: str
    api_key: str | None
    completion_window: str

    @classmethod
    def of(cls, interface: Mapping[str, Any]) -> BatchEndpoint:
        batch = interface.get("batch")
        if not isinstance(batch, Mapping):
            raise SourceFailure("config", "the source declares no interface.batch")
        url_env = str(interface["base_url_env"])
        base_url = url_from_env(url_env, "interface.base_url_env")
        key_env = interface.get("api_key_env")
        api_key = key_from_env(str(key_env), "interface.api_key_env", url_env) if key_env else None
        return cls(base_url, api_key, str(batch["completion_window"]))


@dataclass(frozen=True)
class LineResult:
    """One request's answer inside a completed batch."""

    status_code: int
    body: dict[str, Any]


@dataclass(frozen=True)
class BatchState:
    """A batch as last polled: its status; once completed, each ``custom_id``'s answer (a
    custom id missing from both files is a line the provider dropped)."""

    batch_id: str
    status: str
    results: dict[str, LineResult] = field(default_factory=dict)

    @property
    def pending(self) -> bool:
        return self.status in PENDING_STATUSES

    @property
    def failure_class(self) -> str | None:
        return FAILED_BATCH_CLASSES.get(self.status)


def _client(endpoint: BatchEndpoint) -> httpx.Client:
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    return httpx.Client(base_url=endpoint.base_url, headers=headers, timeout=EXCHANGE_TIMEOUT_S)


def _exchange(client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise SourceFailure(
            "transport", f"batch API {method} {path}: {type(exc).__name__}"
        ) from None
    if response.status_code != 200:
        text = response.text[:MAX_ERROR_TEXT]
        raise SourceFailure(
            "server_error",
            f"batch API {method} {path}: HTTP {response.status_code}: {text}",
            http_status=response.status_code,
        )
    return response


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        parsed = response.json()
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise SourceFailure("invalid_response", f"batch API: {what} is not a JSON object")
    return parsed


def submit(
    endpoint: BatchEndpoint,
    requests: Sequence[tuple[str, dict[str, Any]]],
    *,
    metadata: Mapping[str, str] | None = None,
) -> str:
    """Upload ``(custom_id, chat request body)`` pairs as one JSONL file and create a batch of
    them; the provider's batch id."""
    if not requests:
        raise ValueError("a batch needs at least one request")
    jsonl = "".join(
        json.dumps({"custom_id": cid, "method": "POST", "url": CHAT_PATH, "body": body}) + "\n"
        for cid, body in requests
    ).encode()
    with _client(endpoint) as client:
        uploaded = _json_object(
            _exchange(
                client,
                "POST",
                "/files",
                data={"purpose": "batch"},
                files={"file": ("chukwa-batch.jsonl", jsonl, "application/jsonl")},
            ),
            "the uploaded file",
        )
        created = _json_object(
            _exchange(
                client,
                "POST",
                "/batches",
                json={
                    "input_file_id": uploaded.get("id"),
                    "endpoint": CHAT_PATH,
                    "completion_window": endpoint.completion_window,
                    **({"metadata": dict(metadata)} if metadata else {}),
                },
            ),
            "the created batch",
        )
    batch_id = created.get("id")
    if not isinstance(batch_id, str) or not batch_id:
        raise SourceFailure("invalid_response", "batch API: the created batch has no id")
    return batch_id


def poll(endpoint: BatchEndpoint, batch_id: str) -> BatchState:
    """The batch's status; once ``completed``, every line's answer read from its files."""
    with _client(endpoint) as client:
        batch = _json_object(_exchange(client, "GET", f"/batches/{batch_id}"), "the batch")
        status = batch.get("status")
        if not isinstance(status, str):
            raise SourceFailure("invalid_response", f"batch API: batch {batch_id} has no status")
        if status != "completed":
            return BatchState(batch_id, status)
        results: dict[str, LineResult] = {}
        for key in ("output_file_id", "error_file_id"):
            file_id = batch.get(key)
            if isinstance(file_id, str) and file_id:
                content = _exchange(client, "GET", f"/files/{file_id}/content").text
                results.update(_lines(content, batch_id))
    return BatchState(batch_id, status, results)


def _lines(content: str, batch_id: str) -> dict[str, LineResult]:
    results: dict[str, LineResult] = {}
    for number, raw in enumerate(content.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            response = line["response"]
            results[str(line["custom_id"])] = LineResult(
                int(response["status_code"]), dict(response["body"])
            )
        except (ValueError, KeyError, TypeError):
            raise SourceFailure(
                "invalid_response", f"batch API: line {number} of batch {batch_id}'s output"
            ) from None
    return results


def cancel(endpoint: BatchEndpoint, batch_id: str) -> str:
    """Ask the provider to cancel the batch; its status as answered."""
    with _client(endpoint) as client:
        batch = _json_object(
            _exchange(client, "POST", f"/batches/{batch_id}/cancel"), "the cancelled batch"
        )
    return str(batch.get("status"))
