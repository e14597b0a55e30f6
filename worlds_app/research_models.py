"""The experiment's budget ledger and reservations, people's reference values and interviews:
models of ``worlds_app`` kept apart from ``worlds_app.models`` for size (it imports them, so they
are registered with the app and read as ``worlds_app.models.X``)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class ExperimentLedger(models.Model):
    """An experiment's budget ledger, on a row of its own (the experiment's row is read by every
    turn and written by structural changes; this one by every LLM call): what calls in flight
    could still spend (reserved before each call, one ``BudgetReservation`` row each) and what
    finished calls spent (settled once each call's finished row is written, or by the reaper
    from that row when its worker died). One statement checks and reserves, so workers on any
    number of machines can never overshoot the budget together."""

    experiment = models.OneToOneField(
        "worlds_app.Experiment", primary_key=True, on_delete=models.CASCADE, related_name="ledger"
    )
    reserved_tokens = models.BigIntegerField(default=0)
    reserved_cost = models.DecimalField(max_digits=20, decimal_places=10, default=0)
    spent_tokens = models.BigIntegerField(default=0)
    spent_cost = models.DecimalField(max_digits=20, decimal_places=10, default=0)

    def __str__(self) -> str:
        return f"ledger of experiment {self.experiment_id}"


class BudgetReservation(models.Model):
    """One LLM call's reservation against its experiment's budget, until settled. Its id is the
    call's ``LlmCall`` id (once the call's rows exist): the reaper settles a reservation whose
    worker died from that row's real usage (none, if the call never finished)."""

    id = models.UUIDField(primary_key=True)
    experiment = models.ForeignKey(
        "worlds_app.Experiment", on_delete=models.CASCADE, related_name="+"
    )
    attempt_id = models.UUIDField(null=True, blank=True, db_index=True)
    tokens = models.BigIntegerField()
    cost = models.DecimalField(max_digits=20, decimal_places=10)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["created_at"], name="budgetres_created_idx")]

    def __str__(self) -> str:
        return f"reservation {self.id} of experiment {self.experiment_id}"


class ReferenceValue(models.Model):
    """One observed value from people (docs/populations.md, "Comparing with people"): a unit
    (a person, a session), a metric of the experiment by label, and the value. Results compare
    each arm's worlds with these values; an upload is written whole or not at all."""

    experiment = models.ForeignKey(
        "worlds_app.Experiment", on_delete=models.CASCADE, related_name="reference_values"
    )
    unit = models.CharField(max_length=200)
    metric_label = models.CharField(max_length=64)
    value = models.FloatField()
    uploaded_at = models.DateTimeField(auto_now_add=True)
    uploaded_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["experiment", "metric_label", "id"]
        constraints = [
            # Rule: a unit is observed once per metric.
            models.UniqueConstraint(
                fields=["experiment", "metric_label", "unit"], name="reference_value_unique"
            ),
            models.CheckConstraint(condition=~Q(unit=""), name="reference_value_unit_nonempty"),
        ]

    def __str__(self) -> str:
        return f"{self.metric_label} of {self.unit}: {self.value}"


class Interview(models.Model):
    """Agents asked questions about a committed turn, each in its own view (docs/populations.md,
    "Interviewing without disturbing"), by a worker on a throwaway branch of that turn: nothing
    of the world is written; the state hashes before and after show it. ``answers``: [{subject,
    question, answer, llm_call}] in the order asked. ``status``: queued → running → completed |
    failed; a running row whose lease expired (worker killed) is queued again by the reaper, or
    failed once it has been tried ``MAX_INTERVIEW_TRIES`` times."""

    world = models.ForeignKey(
        "worlds_app.World", on_delete=models.CASCADE, related_name="interviews"
    )
    turn_number = models.IntegerField()
    subjects = models.JSONField()
    questions = models.JSONField()
    source_hash = models.CharField(max_length=64)
    answers = models.JSONField(default=list)
    status = models.CharField(max_length=16)  # queued | running | completed | failed
    tries = models.IntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error_code = models.CharField(max_length=40, blank=True)
    error_message = models.TextField(blank=True)
    state_hash_before = models.CharField(max_length=64, blank=True)
    state_hash_after = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"interview of {self.world_id}#{self.turn_number}"


class PendingJudging(models.Model):
    """A judging (world, turn, metric) whose judge call waits in a provider batch
    (``interface.batch``; docs/costs.md, "Batch"): the turn stays unmeasured, not failed, until
    the batch ends and the world is measured again (``measure_redrive.batch_answers_redrive``).
    Gone once its measurement is written."""

    world = models.ForeignKey(
        "worlds_app.World", on_delete=models.CASCADE, related_name="pending_judgings"
    )
    turn_number = models.IntegerField()
    metric = models.ForeignKey("scenarios_app.Metric", on_delete=models.PROTECT, related_name="+")
    # the queued request the judging waits on (a retry's is a new one)
    request = models.ForeignKey(
        "cognition_app.BatchRequest", on_delete=models.CASCADE, related_name="+"
    )
    noted_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["world", "turn_number", "metric"], name="pendingjudging_unique"
            )
        ]

    def __str__(self) -> str:
        return f"judging of world {self.world_id}, turn {self.turn_number}, waiting on a batch"


class BiographyRun(models.Model):
    """A population's biographies being written by a worker (docs/populations.md, "Biographies
    written by a model"): accepted ``queued`` by the request once everything is checked, run on
    the measure queue, ``completed`` with the new version's hash or ``failed`` with the error
    the request would have answered (code, message, details, HTTP status). Each agent's text is
    kept as it arrives (``BiographyText``): a try after a killed worker asks only the agents
    still without one. A running row whose lease expired is queued again by the reaper, or
    failed once tried ``MAX_BIOGRAPHY_TRIES`` times; none is left running."""

    population = models.CharField(max_length=64)  # the version the biographies are written for
    label = models.CharField(max_length=64)  # the population's label, for lists
    source_hash = models.CharField(max_length=64)
    prompt = models.TextField()
    entity_template = models.JSONField()
    budget = models.JSONField(null=True, blank=True)  # the request's ``budget``, as given
    agents = models.IntegerField()
    done = models.IntegerField(default=0)  # agents with their text
    status = models.CharField(max_length=16)  # queued | running | completed | failed
    tries = models.IntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)  # the new version: hash, calls, cost…
    error_code = models.CharField(max_length=40, blank=True)
    error_message = models.TextField(blank=True)
    error_details = models.JSONField(default=dict, blank=True)
    error_status = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["status", "created_at"],
                name="biographyrun_open",
                condition=Q(status__in=["queued", "running"]),
            )
        ]

    def __str__(self) -> str:
        return f"biographies of {self.label} {self.population[:12]} ({self.status})"


class BiographyText(models.Model):
    """One agent's biography in a run, written as soon as the source answered it."""

    run = models.ForeignKey(BiographyRun, on_delete=models.CASCADE, related_name="texts")
    index = models.IntegerField()  # the agent, 1…size
    text = models.TextField()
    call = models.UUIDField()  # its traced LLM call

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="biographytext_unique")
        ]

    def __str__(self) -> str:
        return f"agent {self.index} of run {self.run_id}"
