"""Worlds, committed turns, turn attempts and their audit trail.

Snapshot storage: every committed turn stores the *whole* world state (environments and entities
in scenario order) as one JSONB document plus its RFC 8785 sha256. Worlds are bounded by the
256 KiB scenario limit, so a full copy per turn is cheap, makes any turn readable with one row,
and makes diffs between any two turns a pure function of two rows. Committed turns are immutable:
no service updates them, and a database trigger rejects any UPDATE of a turn row.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Length
from django.db.models.lookups import LessThanOrEqual

from chukwa_core.experiment_design import ExperimentDesign
from chukwa_core.ids import HASH_PATTERN, LABEL_PATTERN
from scenarios_app.models import Scenario


class Experiment(models.Model):
    """Paired worlds answering one question (docs/experiments.md): arms by replicates ordinary
    worlds ``<slug>--<arm>--<i>``, replicate i seeded alike in every arm, measured every turn.
    ``design`` is the validated request with every reference resolved to a hash, stored as
    ``ExperimentDesign.to_json`` writes it; code reads it typed (``typed_design``). Its status is
    read from its worlds' attempts (a cancelled experiment records when)."""

    slug = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    design = models.JSONField()
    # The pre-registration: the design as created, frozen, and its hash; later changes
    # (replicates, metrics) go to ``design`` and are listed in ``history`` with when and who.
    registered_design = models.JSONField(null=True, blank=True)
    registered_hash = models.CharField(max_length=64, blank=True)
    history = models.JSONField(default=list, blank=True)
    seed = models.BigIntegerField()
    cancelled_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True)
    # The budget (one total over all its worlds and judges; null: no limit); its ledger is
    # its own row (ExperimentLedger), so that every LLM call's reserve and settle never write
    # this one.
    max_tokens_total = models.BigIntegerField(null=True, blank=True)
    max_cost_total = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    budget_exhausted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"experiment {self.slug}"

    @property
    def has_budget(self) -> bool:
        return self.max_tokens_total is not None or self.max_cost_total is not None

    @property
    def typed_design(self) -> ExperimentDesign:
        """The design as its one typed value (parsed from the stored JSON on each read, so a
        saved change is never hidden behind a stale copy)."""
        return ExperimentDesign.from_json(self.design)


class World(models.Model):
    slug = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    scenario = models.ForeignKey(Scenario, on_delete=models.PROTECT, related_name="worlds")
    # The scenario as it was at creation (slug, description, chronon, profiles with their
    # resolved workflows, environments, entities); later name changes never affect the world.
    scenario_snapshot = models.JSONField()
    # What the caller passed: {"name": …} | {"hash": …} | {"data": "<assembled>"}.
    scenario_ref = models.JSONField()
    label = models.CharField(max_length=64)
    chronon_seconds = models.IntegerField()
    current_turn = models.IntegerField(default=0)
    # Attempts are numbered per world in enqueue order; the counter lives on the world row so
    # that racing enqueues (serialized by the row lock) get contiguous, unique numbers.
    next_attempt_seq = models.IntegerField(default=1)
    # Replay, set at creation: {"world": <slug>, "mode": <mode>} as given, and the
    # source world itself. If the source is deleted later, replay_source becomes NULL while
    # replay_from stays, and the world's attempts fail saying so (never a silent switch to live).
    replay_from = models.JSONField(null=True, blank=True)
    replay_source = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replays"
    )
    # The world's seed (chukwa_core.seeds, docs/determinism.md): its rule-policy draws and the
    # seeds its LLM calls send come from it. NULL: unseeded (draws from the slug, no seed sent).
    seed = models.BigIntegerField(null=True, blank=True)
    # Reuse (docs/costs.md): "exact" answers an LLM call whose whole request equals a recorded
    # succeeded call's from that record; "off" sends every call. An experiment's worlds have
    # their experiment's.
    reuse = models.CharField(max_length=8, default="off")
    # A branch (docs/worlds.md): the world and committed turn it started from, as given. The
    # parent row may be deleted later (branch_parent becomes NULL); the slug and turn stay.
    branched_from_slug = models.CharField(max_length=64, blank=True)
    branched_from_turn = models.IntegerField(null=True, blank=True)
    branch_parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="branches"
    )
    # How many of its interventions are pending: read with the claim (the world's row), so a
    # turn looks its intervention up only when there may be one (a query per turn cost ~4 ms).
    pending_interventions = models.IntegerField(default=0)
    # a world of an experiment: its arm and replicate (1…R)
    experiment = models.ForeignKey(
        Experiment, null=True, blank=True, on_delete=models.CASCADE, related_name="worlds"
    )
    arm = models.CharField(max_length=64, blank=True)
    replicate = models.IntegerField(null=True, blank=True)
    # An experiment's world is dispatched only once admitted (services/dispatch.py): at most
    # CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT admitted worlds of one experiment have turns queued or
    # running, so experiments share the workers. NULL: not admitted yet (or no experiment).
    admitted_at = models.DateTimeField(null=True, blank=True)
    # Set when admitted; cleared by a later admission that finds the world has nothing queued,
    # running or parked any more. Admission counts the worlds in flight among these only (a
    # few dozen), not among every admitted world: at 10,000 worlds, most of them done, that
    # count read every one of them each time a world ended.
    in_flight = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "slug"]
        indexes = [
            models.Index(
                fields=["experiment"], name="world_in_flight_idx", condition=Q(in_flight=True)
            ),
            # the worlds admission looks at next (an experiment's not admitted yet, by id)
            models.Index(
                fields=["experiment", "id"],
                name="world_waiting_idx",
                condition=Q(admitted_at__isnull=True, experiment__isnull=False),
            ),
        ]
        constraints = [
            # Rule: world slugs are labels.
            models.CheckConstraint(
                condition=Q(slug__regex=LABEL_PATTERN), name="world_slug_grammar"
            ),
            models.CheckConstraint(condition=Q(current_turn__gte=0), name="world_turn_gte_0"),
            models.CheckConstraint(
                condition=Q(reuse__in=["exact", "off"]), name="world_reuse_mode"
            ),
            # Rule: a replay source is only ever set together with the replay_from it came from.
            models.CheckConstraint(
                condition=Q(replay_source__isnull=True) | Q(replay_from__isnull=False),
                name="world_replay_source_has_replay_from",
            ),
            # Rule: a seed is never negative (the services also keep it < 2^53, exact in every JSON
            # client; rows written before that rule may hold larger ones).
            models.CheckConstraint(
                condition=Q(seed__isnull=True) | Q(seed__gte=0), name="world_seed_gte_0"
            ),
            # Rule: a branch names its parent's slug and turn together (turn ≥ 0).
            models.CheckConstraint(
                condition=Q(branched_from_slug="", branched_from_turn__isnull=True)
                | Q(branched_from_turn__gte=0) & ~Q(branched_from_slug=""),
                name="world_branch_slug_and_turn",
            ),
            models.CheckConstraint(
                condition=Q(branch_parent__isnull=True) | Q(branched_from_turn__isnull=False),
                name="world_branch_parent_has_turn",
            ),
            models.CheckConstraint(
                condition=Q(pending_interventions__gte=0), name="world_pending_interventions_gte_0"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.slug} (turn {self.current_turn})"

    def get_absolute_url(self) -> str:
        return f"/worlds/{self.slug}/"


class WorldBudget(models.Model):
    """One setting of a world's budget; the newest row is in force, older rows are
    its history. A null limit is no limit; a row with all four null lifts the budget."""

    world = models.ForeignKey(World, on_delete=models.CASCADE, related_name="budgets")
    max_tokens_per_turn = models.BigIntegerField(null=True, blank=True)
    max_cost_per_turn = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    max_tokens_total = models.BigIntegerField(null=True, blank=True)
    max_cost_total = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    set_at = models.DateTimeField(auto_now_add=True)
    set_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["world", "-set_at", "-id"]
        constraints = [
            # a limit is positive: 0 would refuse every call, which no-one means to say
            models.CheckConstraint(
                condition=(Q(max_tokens_per_turn__isnull=True) | Q(max_tokens_per_turn__gt=0))
                & (Q(max_cost_per_turn__isnull=True) | Q(max_cost_per_turn__gt=0))
                & (Q(max_tokens_total__isnull=True) | Q(max_tokens_total__gt=0))
                & (Q(max_cost_total__isnull=True) | Q(max_cost_total__gt=0)),
                name="world_budget_limits_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"budget of world {self.world_id} set {self.set_at:%Y-%m-%d %H:%M}"


class Turn(models.Model):
    world = models.ForeignKey(World, on_delete=models.CASCADE, related_name="turns")
    number = models.IntegerField()
    simulation_time = models.DateTimeField()
    state = models.JSONField()
    state_hash = models.CharField(max_length=64)
    attempt = models.OneToOneField(
        "TurnAttempt", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["world", "number"]
        constraints = [
            # Rule: exactly one committed snapshot per turn number.
            models.UniqueConstraint(fields=["world", "number"], name="turn_world_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=0), name="turn_number_gte_0"),
            models.CheckConstraint(
                condition=Q(state_hash__regex=HASH_PATTERN), name="turn_state_hash_grammar"
            ),
            # Rule: a world's first turn is its creation snapshot (turn 0, or the turn a branch
            # starts at: a copy of its parent's), the only turn without an attempt; every
            # later turn comes from an attempt.
            models.CheckConstraint(
                condition=Q(attempt__isnull=True) | Q(number__gt=0),
                name="turn_attempt_not_at_zero",
            ),
            models.UniqueConstraint(
                fields=["world"],
                condition=Q(attempt__isnull=True),
                name="turn_one_creation_snapshot",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.world_id}#{self.number}"


class AttemptStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    COMMITTED = "committed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    # parked (a batch-mode experiment's attempt): its call waits in a provider batch; it holds
    # no worker and no lease, and resumes (queued again) when the batch ends
    WAITING = "waiting"


# Not finished: the world is busy. A waiting attempt keeps the world's later attempts behind it.
ACTIVE_STATUSES = (AttemptStatus.QUEUED, AttemptStatus.RUNNING, AttemptStatus.WAITING)


class TurnAttempt(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    world = models.ForeignKey(World, on_delete=models.CASCADE, related_name="attempts")
    seq = models.IntegerField()
    batch_id = models.UUIDField()
    batch_index = models.IntegerField()
    batch_size = models.IntegerField()
    status = models.CharField(
        max_length=16, choices=AttemptStatus.choices, default=AttemptStatus.QUEUED
    )
    # Set when claimed: the turn this attempt tries to produce.
    attempted_turn = models.IntegerField(null=True, blank=True)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.IntegerField(null=True, blank=True)
    failure_step = models.CharField(max_length=100, blank=True)
    failure_subject = models.CharField(max_length=200, blank=True)
    failure_reason = models.TextField(blank=True)
    produced_turn = models.IntegerField(null=True, blank=True)
    requested_by = models.CharField(max_length=200, blank=True)
    # what a running attempt's call waits for now (a model slot and who holds it, a rate limit,
    # an interactive turn first); "" when none waits (docs/operations.md, "Interactive first")
    waiting_for = models.CharField(max_length=300, blank=True)
    # a parked attempt's batch requests (cognition_app BatchRequest ids): it resumes once every
    # one has ended; how many times it parked
    # (defaults in the database: experiments insert their attempts in bulk SQL)
    batch_requests = models.JSONField(null=True, blank=True)
    parks = models.IntegerField(default=0, db_default=0)

    class Meta:
        ordering = ["world", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["world", "seq"], name="attempt_world_seq_unique"),
            # Rule: only one running attempt per world.
            models.UniqueConstraint(
                fields=["world"],
                condition=Q(status="running"),
                name="attempt_one_running_per_world",
            ),
            models.CheckConstraint(
                condition=Q(batch_index__gte=0) & Q(batch_index__lt=models.F("batch_size")),
                name="attempt_batch_index_range",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "lease_expires_at"], name="attempt_lease_idx"),
            # The attempt index (page and API) and the home page read the newest attempts
            # first: overall, and of one status (running, failed lately). One world's attempts
            # are found through the world's foreign-key index (the filter is by slug, a join,
            # so an ordered (world, queued_at) index could not serve the order anyway).
            models.Index(fields=["-queued_at", "-seq"], name="attempt_queued_idx"),
            models.Index(fields=["status", "-queued_at", "-seq"], name="attempt_status_queued_idx"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.id} ({self.status})"

    def get_absolute_url(self) -> str:
        return f"/attempts/{self.pk}/"

    @property
    def is_finished(self) -> bool:
        return self.status not in ACTIVE_STATUSES


class EventKind(models.TextChoices):
    ATTEMPT_STARTED = "attempt_started"
    AMBIENT_SOURCE_INVOKED = "ambient_source_invoked"
    GENERATION_REJECTED = "generation_rejected"
    TOOL_INVOKED = "tool_invoked"
    NODE_OUTPUT = "node_output"
    INNER_MONOLOGUE = "inner_monologue"
    WORLD_PATCH_APPLIED = "world_patch_applied"
    # a target set by two patches of one concurrent phase: the later value is kept
    EFFECT_CONTESTED = "effect_contested"
    TURN_COMMITTED = "turn_committed"
    ATTEMPT_FAILED = "attempt_failed"
    ATTEMPT_INTERRUPTED = "attempt_interrupted"
    ATTEMPT_CANCELLED = "attempt_cancelled"
    # parked: its call waits in a provider batch (a batch-mode experiment)
    ATTEMPT_WAITING = "attempt_waiting"


class AttemptEvent(models.Model):
    # No index of its own: event_attempt_seq_unique leads with it.
    attempt = models.ForeignKey(
        TurnAttempt, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    seq = models.IntegerField()
    kind = models.CharField(max_length=40, choices=EventKind.choices)
    subject_id = models.CharField(max_length=200, blank=True)
    node_id = models.CharField(max_length=64, blank=True)
    workflow_hash = models.CharField(max_length=64, blank=True)
    patch_seq = models.IntegerField(null=True, blank=True)
    payload = models.JSONField(default=dict)
    content_hash = models.CharField(max_length=64, blank=True)
    # Links into the traces (cognition_app); plain ids so the apps' migrations stay acyclic.
    invocation_id = models.UUIDField(null=True, blank=True, db_index=True)
    llm_call_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["attempt", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["attempt", "seq"], name="event_attempt_seq_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.seq}"


class TransitionTarget(models.TextChoices):
    ENTITY_STATE = "entity_state"
    ENTITY_MEMORY = "entity_memory"
    ENVIRONMENT = "environment"


class PatchTransition(models.Model):
    """One applied effect: who changed what, from what, to what, in which patch of which turn."""

    # No index of their own: transition_unique_effect and transition_target_idx lead with them.
    attempt = models.ForeignKey(
        TurnAttempt, on_delete=models.CASCADE, related_name="transitions", db_index=False
    )
    world = models.ForeignKey(
        World, on_delete=models.CASCADE, related_name="transitions", db_index=False
    )
    turn_number = models.IntegerField()
    patch_seq = models.IntegerField()
    effect_index = models.IntegerField()
    subject_id = models.CharField(max_length=200)
    node_id = models.CharField(max_length=64)
    workflow_hash = models.CharField(max_length=64)
    op = models.CharField(max_length=40)
    target_kind = models.CharField(max_length=20, choices=TransitionTarget.choices)
    target_id = models.CharField(max_length=200)
    before = models.TextField()
    after = models.TextField()
    # The generation that decided it (LLM nodes); empty for rule policies.
    invocation_id = models.UUIDField(null=True, blank=True)
    llm_call_id = models.UUIDField(null=True, blank=True)
    # The operator's intervention that made it (patch_seq 1 of its turn); empty otherwise.
    intervention = models.ForeignKey(
        "Intervention", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["world", "turn_number", "patch_seq", "effect_index"]
        constraints = [
            models.UniqueConstraint(
                fields=["attempt", "patch_seq", "effect_index"], name="transition_unique_effect"
            ),
        ]
        indexes = [
            models.Index(fields=["world", "target_kind", "target_id"], name="transition_target_idx")
        ]

    def __str__(self) -> str:
        return f"{self.target_id}: {self.before[:20]} → {self.after[:20]}"


class Intervention(models.Model):
    """An operator's WorldPatch for one future turn of a world (docs/worlds.md): applied as that
    turn's first patch, before any subject thinks, by the same kernel as every patch. Pending
    until the turn commits with it; then consumed, and kept as the turn's provenance."""

    world = models.ForeignKey(World, on_delete=models.CASCADE, related_name="interventions")
    turn = models.IntegerField()
    patch = models.JSONField()
    note = models.TextField(blank=True)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set in the commit of the turn that applied it: the intervention is consumed.
    consumed_by = models.OneToOneField(
        TurnAttempt, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["world", "turn"]
        constraints = [
            # Rule: one intervention holds a turn (pending or consumed).
            models.UniqueConstraint(fields=["world", "turn"], name="intervention_one_per_turn"),
            models.CheckConstraint(condition=Q(turn__gt=0), name="intervention_turn_gt_0"),
            models.CheckConstraint(
                condition=Q(consumed_by__isnull=True, consumed_at__isnull=True)
                | Q(consumed_by__isnull=False, consumed_at__isnull=False),
                name="intervention_consumed_together",
            ),
        ]

    def __str__(self) -> str:
        return f"intervention {self.pk} of {self.world_id} at turn {self.turn}"

    @property
    def consumed(self) -> bool:
        return self.consumed_by_id is not None


class DeletedWorld(models.Model):
    slug = models.CharField(max_length=64)
    name = models.CharField(max_length=200)
    label = models.CharField(max_length=64)
    scenario_hash = models.CharField(max_length=64)
    final_turn = models.IntegerField()
    created_at = models.DateTimeField()
    deleted_at = models.DateTimeField(auto_now_add=True)
    deleted_by = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-deleted_at"]

    def __str__(self) -> str:
        return f"deleted {self.slug}"


class AnnotationTarget(models.TextChoices):
    ATTEMPT = "attempt"
    TURN = "turn"
    LLM_CALL = "llm_call"


class AnnotationValueKind(models.TextChoices):
    NUMBER = "number"
    LABEL = "label"
    BOOLEAN = "boolean"


# A comment is at most 4 KiB of UTF-8; the service checks bytes, the database backstops characters.
MAX_ANNOTATION_COMMENT_BYTES = 4096


class Annotation(models.Model):
    """A reviewer's named score (number, label or boolean) with a comment on an attempt, a
    committed turn or an LLM call. Mutable by its author or an operator."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    target_kind = models.CharField(max_length=16, choices=AnnotationTarget.choices)
    attempt = models.ForeignKey(
        TurnAttempt, null=True, blank=True, on_delete=models.CASCADE, related_name="annotations"
    )
    turn = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.CASCADE, related_name="annotations"
    )
    llm_call = models.ForeignKey(
        "cognition_app.LlmCall",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="annotations",
    )
    name = models.CharField(max_length=64)
    value_kind = models.CharField(max_length=16, choices=AnnotationValueKind.choices)
    value_number = models.FloatField(null=True, blank=True)
    value_label = models.CharField(max_length=64, blank=True)
    value_boolean = models.BooleanField(null=True, blank=True)
    comment = models.TextField(blank=True)
    # PROTECT: a reviewer's scores are not lost silently when an account is removed.
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="annotations"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "id"]
        constraints = [
            # Rule: annotation names are labels.
            models.CheckConstraint(
                condition=Q(name__regex=LABEL_PATTERN), name="annotation_name_grammar"
            ),
            # Rule: exactly the target named by target_kind is set.
            models.CheckConstraint(
                condition=Q(
                    target_kind="attempt",
                    attempt__isnull=False,
                    turn__isnull=True,
                    llm_call__isnull=True,
                )
                | Q(
                    target_kind="turn",
                    attempt__isnull=True,
                    turn__isnull=False,
                    llm_call__isnull=True,
                )
                | Q(
                    target_kind="llm_call",
                    attempt__isnull=True,
                    turn__isnull=True,
                    llm_call__isnull=False,
                ),
                name="annotation_one_target",
            ),
            # Rule: exactly the value column named by value_kind is set; labels are labels.
            models.CheckConstraint(
                condition=Q(
                    value_kind="number",
                    value_number__isnull=False,
                    value_label="",
                    value_boolean__isnull=True,
                )
                | Q(
                    value_kind="label",
                    value_number__isnull=True,
                    value_label__regex=LABEL_PATTERN,
                    value_boolean__isnull=True,
                )
                | Q(
                    value_kind="boolean",
                    value_number__isnull=True,
                    value_label="",
                    value_boolean__isnull=False,
                ),
                name="annotation_one_value",
            ),
            # Rule: a comment is at most 4 KiB (checked in bytes by the service).
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("comment"), MAX_ANNOTATION_COMMENT_BYTES),
                name="annotation_comment_size",
            ),
        ]
        indexes = [
            models.Index(fields=["name", "-created_at"], name="annotation_name_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name}={self.value} on {self.target_kind}"

    @property
    def value(self) -> float | str | bool | None:
        if self.value_kind == AnnotationValueKind.NUMBER:
            return self.value_number
        if self.value_kind == AnnotationValueKind.LABEL:
            return self.value_label
        return self.value_boolean


class Measurement(models.Model):
    """One metric's result on one committed turn of a world (docs/measurement.md): a value or an
    error (code and message), never both. A branch's turns before its branch point are its
    parent's rows and are measured as the parent's (once for every branch sharing them); a
    branch's reads take them from there, so its series is whole. Written once: measuring again
    finds the row and writes nothing."""

    world = models.ForeignKey(World, on_delete=models.CASCADE, related_name="measurements")
    turn_number = models.IntegerField()
    # PROTECT: a metric is content (never deleted) and its measurements cite it.
    metric = models.ForeignKey(
        "scenarios_app.Metric", on_delete=models.PROTECT, related_name="measurements"
    )
    value = models.FloatField(null=True, blank=True)
    error_code = models.CharField(max_length=40, blank=True)
    error_message = models.TextField(blank=True)
    # The judge's LLM call (an llm_judge metric); null for an expression.
    llm_call = models.ForeignKey(
        "cognition_app.LlmCall",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="measurements",
    )
    # The agent a survey metric asked (one row per agent and turn); "" for every other kind.
    subject = models.CharField(max_length=64, blank=True, default="")
    measured_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["world", "metric", "turn_number", "subject"]
        constraints = [
            # Rule: one row per (world, turn, metric, subject): measuring again reuses it.
            models.UniqueConstraint(
                fields=["world", "turn_number", "metric", "subject"], name="measurement_unique"
            ),
            models.CheckConstraint(condition=Q(turn_number__gte=0), name="measurement_turn_gte_0"),
            # Rule: a value or an error, exactly one.
            models.CheckConstraint(
                condition=Q(value__isnull=False, error_code="")
                | Q(value__isnull=True) & ~Q(error_code=""),
                name="measurement_value_or_error",
            ),
        ]
        indexes = [
            # a metric's measurements over every world (agreement, the metric page)
            models.Index(fields=["metric", "world", "turn_number"], name="measurement_metric_idx"),
        ]

    def __str__(self) -> str:
        shown = self.value if self.error_code == "" else self.error_code
        return f"{self.metric_id[:12]} of {self.world_id}#{self.turn_number}: {shown}"


# Models kept in their own module for size, imported here so Django registers them with the app.
from worlds_app.research_models import (  # noqa: E402, F401
    BiographyRun,
    BiographyText,
    BudgetReservation,
    ExperimentLedger,
    Interview,
    PendingJudging,
    ReferenceValue,
)
