"""Durable traces of every source call.

Rows are written in their own transactions while the attempt runs (never inside the turn commit),
so they survive a failed or crashed attempt: the invocation and LLM call rows exist, status
``running``, before the first byte is sent; streamed chunks are appended in small batches.

Why cognition owns these tables, not worlds: they are written by the source layer while a
subject thinks — before, and independently of, whatever the attempt's outcome will be — and
everything that writes or reads them (sources, ambient, LLM nodes, trace selectors) lives here.
Each row belongs to an attempt of a world, so it carries real foreign keys to
``worlds_app.TurnAttempt`` and ``worlds_app.World``; they are lazy model references (strings),
a link in the database schema only: no module here imports the worlds app, which stays above.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from chukwa_core.ids import URL_ENV_PATTERN


class InvocationKind(models.TextChoices):
    LLM_GENERATION = "llm_generation"
    AMBIENT_CONTEXT = "ambient_context"
    MODEL_ELECTED_TOOL = "model_elected_tool"  # also a rule policy's planned tool call
    # the structured-output check of an LLM backend, traced in the attempt that needed it
    CONFORMANCE_CHECK = "conformance_check"
    # a metric's LLM judge scoring a committed turn (outside any attempt)
    JUDGE = "judge"
    # an agent interviewed about a committed turn (outside any attempt; the world unchanged)
    INTERVIEW = "interview"
    # a population's agent's biography written by an LLM source (outside any world)
    BIOGRAPHY = "biography"


class InvocationStatus(models.TextChoices):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    # stopped because another subject of its concurrent phase failed
    CANCELLED = "cancelled"


class SourceInvocation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of their own: invocation_attempt_seq_unique and invocation_request_key_idx lead
    # with them (each index more is written by every call's insert and finish).
    # None for a call made outside any attempt: a metric's judge (kind ``judge``), whose
    # measurement links to its LLM call
    attempt = models.ForeignKey(
        "worlds_app.TurnAttempt",
        on_delete=models.CASCADE,
        related_name="invocations",
        db_index=False,
        null=True,
        blank=True,
    )
    # None for a call made outside any world: a population's biography (kind ``biography``)
    world = models.ForeignKey(
        "worlds_app.World",
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        null=True,
        blank=True,
    )
    attempted_turn = models.IntegerField()
    seq = models.IntegerField()
    workflow_hash = models.CharField(max_length=64, blank=True)
    node_id = models.CharField(max_length=64, blank=True)
    subject_id = models.CharField(max_length=200, blank=True)
    source_hash = models.CharField(max_length=64)
    source_label = models.CharField(max_length=64, blank=True)
    kind = models.CharField(max_length=24, choices=InvocationKind.choices)
    ambient_source_id = models.CharField(max_length=64, blank=True)
    tool_name = models.CharField(max_length=64, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    status = models.CharField(
        max_length=16, choices=InvocationStatus.choices, default=InvocationStatus.RUNNING
    )
    failure_class = models.CharField(max_length=40, blank=True)
    failure_message = models.TextField(blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.IntegerField(null=True, blank=True)
    request = models.JSONField(default=dict)
    response_json = models.JSONField(null=True, blank=True)
    response_text = models.TextField(blank=True)
    response_headers = models.JSONField(default=dict)
    http_status = models.IntegerField(null=True, blank=True)
    input_schema_hash = models.CharField(max_length=64, blank=True)
    output_schema_hash = models.CharField(max_length=64, blank=True)
    validation_status = models.CharField(max_length=16, blank=True)
    validation_errors = models.JSONField(default=list)
    generation_attempt = models.IntegerField(null=True, blank=True)
    tool_loop_round = models.IntegerField(null=True, blank=True)
    model_output_kind = models.CharField(max_length=16, blank=True)
    # sha256 of the canonical (source hash, request as sent minus credentials and per-call ids):
    # what replay matches on.
    request_key = models.CharField(max_length=64, blank=True)
    # The recorded invocation this one was served from, without any network call.
    # A plain id like the event links: the source world may be deleted later, and the replayed
    # trace must keep saying where its content came from.
    replayed_from = models.UUIDField(null=True, blank=True)
    # An LLM call's whole request as it would reach the wire: sha256 of the endpoint (the base
    # URL's value and path) and the canonical JSON body (model, messages, params, seed…). Set on
    # every LLM call that had an endpoint; what reuse (``reuse: "exact"``) matches on, across
    # the whole deployment.
    reuse_key = models.CharField(max_length=64, blank=True)
    # The recorded succeeded call this one was answered from under reuse: nothing was sent.
    # A plain id like replayed_from (the original's world may be deleted later).
    reused_from = models.UUIDField(null=True, blank=True)
    # How long the call waited for capacity under its source's cluster-wide ``limits`` before
    # it was sent, and which limit made it wait (``concurrency``, ``requests_per_minute``,
    # ``tokens_per_minute``, ``rate_limited``: the endpoint asked to slow down); null: no wait.
    limit_wait_ms = models.IntegerField(null=True, blank=True)
    limit_wait = models.CharField(max_length=40, blank=True)
    # A later try of a call its source's ``retry`` policy tried again after a transport failure:
    # the call's first try (whose row has none). Each try is a row of its own, with its own seq.
    retry_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="retries",
        db_index=False,
    )

    class Meta:
        ordering = ["attempt", "seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["attempt", "seq"], name="invocation_attempt_seq_unique"
            ),
        ]
        indexes = [
            # the unfinished and failed calls; partial, so that no lookup of succeeded calls
            # (reuse's) can take it for the reuse index while a table has no statistics yet
            # (its planner then guesses one row for either and took this one, reading every
            # succeeded call of the deployment on each LLM call)
            models.Index(
                fields=["status"],
                name="invocation_status_idx",
                condition=~Q(status="succeeded"),
            ),
            # the invocation index (page and API) reads the newest calls first
            models.Index(fields=["-started_at", "id"], name="invocation_started_idx"),
            # replay looks up the k-th recording of a key in one world
            models.Index(
                fields=["world", "request_key", "attempted_turn", "seq"],
                name="invocation_request_key_idx",
            ),
            # reuse finds a succeeded call by its whole request; partial: only live calls that
            # succeeded can answer another
            models.Index(
                fields=["reuse_key", "started_at"],
                name="invocation_reuse_key_idx",
                condition=Q(status="succeeded") & ~Q(reuse_key=""),
            ),
            # the tries of a call; partial: the rows of calls tried once (nearly all) add nothing
            models.Index(
                fields=["retry_of"],
                name="invocation_retry_of_idx",
                condition=Q(retry_of__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.source_label or self.source_hash[:12]} ({self.status})"

    def get_absolute_url(self) -> str:
        return f"/invocations/{self.pk}/"


class ModelPrice(models.Model):
    """What an operator pays per million tokens of one model behind one URL variable, from a
    time on. Mutable operator data, not content-addressed: a new price is a new row
    with a later ``valid_from``, so the row an LLM call used stays as it was."""

    url_env = models.CharField(
        max_length=100
    )  # the source's base_url_env, e.g. CHUKWA_LLM_BASE_URL
    model = models.CharField(max_length=200)  # the model the source requests
    input_per_million = models.DecimalField(max_digits=14, decimal_places=6)
    output_per_million = models.DecimalField(max_digits=14, decimal_places=6)
    cached_input_per_million = models.DecimalField(max_digits=14, decimal_places=6)
    # What the provider's Batch API charges (all three or none): a row without them prices a
    # batched call "unknown", never at the online price or 0.
    batch_input_per_million = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True
    )
    batch_output_per_million = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True
    )
    batch_cached_input_per_million = models.DecimalField(
        max_digits=14, decimal_places=6, null=True, blank=True
    )
    valid_from = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["url_env", "model", "-valid_from"]
        constraints = [
            # one price per pair and instant: "the price at time t" is never ambiguous
            models.UniqueConstraint(
                fields=["url_env", "model", "valid_from"], name="model_price_pair_from_unique"
            ),
            # the URL variable grammar (chukwa_core.ids)
            models.CheckConstraint(
                condition=Q(url_env__regex=URL_ENV_PATTERN),
                name="model_price_url_env_grammar",
            ),
            # a price is never negative (a free model is 0, an unknown one has no row)
            models.CheckConstraint(
                condition=Q(input_per_million__gte=0)
                & Q(output_per_million__gte=0)
                & Q(cached_input_per_million__gte=0),
                name="model_price_not_negative",
            ),
            # batch prices: all three or none, never negative
            models.CheckConstraint(
                condition=(
                    Q(batch_input_per_million__isnull=True)
                    & Q(batch_output_per_million__isnull=True)
                    & Q(batch_cached_input_per_million__isnull=True)
                )
                | (
                    Q(batch_input_per_million__gte=0)
                    & Q(batch_output_per_million__gte=0)
                    & Q(batch_cached_input_per_million__gte=0)
                ),
                name="model_price_batch_all_or_none",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.url_env} {self.model} from {self.valid_from:%Y-%m-%d %H:%M}"


class LlmCall(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    invocation = models.OneToOneField(
        SourceInvocation, on_delete=models.CASCADE, related_name="llm_call"
    )
    base_url = models.CharField(max_length=500)
    requested_model = models.CharField(max_length=200)
    response_model = models.CharField(max_length=200, blank=True)
    messages = models.JSONField(default=list)
    params = models.JSONField(default=dict)
    response_format = models.JSONField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=InvocationStatus.choices, default=InvocationStatus.RUNNING
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    ttft_ms = models.IntegerField(null=True, blank=True)
    raw_text = models.TextField(blank=True)
    normalized_text = models.TextField(blank=True)
    finish_reason = models.CharField(max_length=40, blank=True)
    prompt_tokens = models.IntegerField(null=True, blank=True)
    completion_tokens = models.IntegerField(null=True, blank=True)
    cached_tokens = models.IntegerField(null=True, blank=True)
    usage_source = models.CharField(
        max_length=16, blank=True
    )  # provider | estimated | not_sent | reused
    base_url_env = models.CharField(max_length=100, blank=True)
    # The price row the cost was computed with; null with a null cost when none matched.
    price = models.ForeignKey(
        ModelPrice, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    cost = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    cost_estimated = models.BooleanField(default=False)  # computed from estimated usage
    # Sent through the provider's Batch API (not streamed live): priced at the batch prices.
    batched = models.BooleanField(default=False)
    # the batch line that answered (or failed) a batched call: its provider batch is the batch's
    batch_request = models.ForeignKey(
        "BatchRequest", null=True, blank=True, on_delete=models.SET_NULL, related_name="calls"
    )
    # A call answered under reuse: its cost is 0, its tokens are not spent (prompt and
    # completion tokens stay null); what it would have spent is here, the original call's
    # tokens and cost (null when the original's cost was unknown).
    tokens_reused = models.IntegerField(null=True, blank=True)
    cost_saved = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    parse_error = models.TextField(blank=True)
    validation_errors = models.JSONField(default=list)
    artifacts = models.JSONField(default=dict)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["started_at"]
        indexes = [
            # The LLM-call index (page and API) reads the newest calls first, overall and of
            # one status (failed, running; accepted and rejected are both "succeeded").
            models.Index(fields=["-started_at", "id"], name="llmcall_started_idx"),
            models.Index(fields=["status", "-started_at", "id"], name="llmcall_status_started_idx"),
        ]

    def __str__(self) -> str:
        return f"LLM call {self.id} ({self.status})"

    def get_absolute_url(self) -> str:
        return f"/llm-calls/{self.pk}/"


class LlmChunk(models.Model):
    # No index of its own: chunk_call_seq_unique leads with it.
    call = models.ForeignKey(
        LlmCall, on_delete=models.CASCADE, related_name="chunks", db_index=False
    )
    seq = models.IntegerField()
    offset_ms = models.IntegerField()
    text = models.TextField()

    class Meta:
        ordering = ["call", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["call", "seq"], name="chunk_call_seq_unique"),
        ]

    def __str__(self) -> str:
        return f"chunk {self.seq} +{self.offset_ms}ms"


class SourceProbe(models.Model):
    """Conformance of an LLM backend: does it enforce a response_format JSON schema?"""

    base_url = models.CharField(max_length=500)
    model = models.CharField(max_length=200)
    enforces_schema = models.BooleanField()
    detail = models.TextField(blank=True)
    checked_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["base_url", "model"], name="probe_base_url_model_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.base_url} {self.model}: {'enforces' if self.enforces_schema else 'does NOT enforce'}"


class ProviderBatch(models.Model):
    """One batch sent to a provider's Batch API (``interface.batch``): the requests it holds
    are :class:`BatchRequest` rows. Polled until it ends (cognition_app.batches)."""

    source_hash = models.CharField(max_length=64)
    provider_batch_id = models.CharField(max_length=200)
    # in_progress | completed | failed | expired | cancelled (what the provider said last)
    status = models.CharField(max_length=16, default="in_progress")
    submitted_at = models.DateTimeField(auto_now_add=True)
    polled_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status"], name="providerbatch_status_idx")]

    def __str__(self) -> str:
        return f"provider batch {self.provider_batch_id} ({self.status})"


class BatchRequest(models.Model):
    """One chat request waiting for, or answered by, a provider batch. The database is the
    queue of record: a worker killed while a batch is pending loses nothing, the next poll
    finds the batch and writes its answers here."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    source_hash = models.CharField(max_length=64)
    # the whole request (endpoint and body): identical requests wait on one line
    reuse_key = models.CharField(max_length=64)
    body = models.JSONField()  # the chat request as sent, not streamed
    # who asked (``experiment:<id>``, ``world:<id>``): cancelling the owner cancels its lines
    owner = models.CharField(max_length=100, blank=True)
    # pending (not yet sent) | submitted | completed | failed | cancelled
    status = models.CharField(max_length=16, default="pending")
    batch = models.ForeignKey(
        ProviderBatch, null=True, blank=True, on_delete=models.PROTECT, related_name="requests"
    )
    response_status = models.IntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    failure_class = models.CharField(max_length=40, blank=True)  # batch_failed | batch_expired…
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["status", "source_hash"], name="batchrequest_status_idx"),
            models.Index(fields=["reuse_key"], name="batchrequest_reuse_key_idx"),
        ]

    def __str__(self) -> str:
        return f"batch request {self.id} ({self.status})"
