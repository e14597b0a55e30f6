"""The content-addressed scenario store.

Component and scenario rows are immutable and keyed by their hash; no update service exists for
them. Names are the only mutable pointers, and every change to one is kept in the history.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from chukwa_core.ids import ENTITY_ID_PATTERN, HASH_PATTERN, LABEL_PATTERN
from chukwa_core.metric_kind import METRIC_KIND_PATTERN


def _hash_check(field: str, name: str) -> models.CheckConstraint:
    # Rule: a hash is lowercase hex sha256, 64 characters.
    return models.CheckConstraint(condition=Q(**{f"{field}__regex": HASH_PATTERN}), name=name)


def _label_check(field: str, name: str) -> models.CheckConstraint:
    # Rule: labels follow the label grammar.
    return models.CheckConstraint(condition=Q(**{f"{field}__regex": LABEL_PATTERN}), name=name)


class HashField(models.CharField):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("max_length", 64)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


class ComponentKind(models.TextChoices):
    JSON_SCHEMA = "json_schema", "JSON schema"
    RESPONSE_SOURCE = "response_source", "Response source"
    COGNITION_WORKFLOW = "cognition_workflow", "Cognition workflow"
    COGNITION_PROFILE = "cognition_profile", "Cognition profile"
    ENVIRONMENT = "environment", "Environment"
    ENTITY = "entity", "Entity"
    METRIC = "metric", "Metric"
    POPULATION = "population", "Population"


# URL segment of each component kind, shared by the REST API (/api/<segment>/) and the pages
# (/store/<segment>/).
COLLECTION_SEGMENTS: dict[str, ComponentKind] = {
    "json-schemas": ComponentKind.JSON_SCHEMA,
    "response-sources": ComponentKind.RESPONSE_SOURCE,
    "cognition-workflows": ComponentKind.COGNITION_WORKFLOW,
    "cognition-profiles": ComponentKind.COGNITION_PROFILE,
    "environments": ComponentKind.ENVIRONMENT,
    "entities": ComponentKind.ENTITY,
    "metrics": ComponentKind.METRIC,
    "populations": ComponentKind.POPULATION,
}
# The kinds a scenario is made of (a metric measures worlds of any scenario, bound to none; a
# population is expanded into the scenario's entities, its use recorded beside them).
SCENARIO_KINDS = tuple(
    kind for kind in ComponentKind if kind not in (ComponentKind.METRIC, ComponentKind.POPULATION)
)


class JsonSchema(models.Model):
    hash = HashField(primary_key=True)
    content = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        verbose_name = "JSON schema"
        ordering = ["-created_at", "hash"]
        constraints = [_hash_check("hash", "json_schema_hash_grammar")]

    def __str__(self) -> str:
        title = self.content.get("title") if isinstance(self.content, dict) else None
        return f"{title or 'schema'} {self.hash[:12]}"

    def get_absolute_url(self) -> str:
        return f"/store/json-schemas/{self.pk}/"


class ResponseSource(models.Model):
    hash = HashField(primary_key=True)
    content = models.JSONField()
    # Denormalized from content for filtering and workflow validation.
    label = models.CharField(max_length=64)
    interface = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "hash"]
        constraints = [
            _hash_check("hash", "response_source_hash_grammar"),
            _label_check("label", "response_source_label_grammar"),
        ]

    def __str__(self) -> str:
        return f"{self.label} ({self.interface}) {self.hash[:12]}"

    def get_absolute_url(self) -> str:
        return f"/store/response-sources/{self.pk}/"


class CognitionWorkflow(models.Model):
    hash = HashField(primary_key=True)
    # Stored with every reference resolved to {"hash": …}.
    content = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "hash"]
        constraints = [_hash_check("hash", "cognition_workflow_hash_grammar")]

    def __str__(self) -> str:
        nodes = self.content.get("nodes", []) if isinstance(self.content, dict) else []
        ids = "→".join(n.get("id", "?") for n in nodes if isinstance(n, dict))
        return f"workflow {ids} {self.hash[:12]}"

    def get_absolute_url(self) -> str:
        return f"/store/cognition-workflows/{self.pk}/"


class WorkflowComponentRef(models.Model):
    """One edge per reference inside a stored workflow, so "uses" needs no JSON scans."""

    workflow = models.ForeignKey(CognitionWorkflow, on_delete=models.CASCADE, related_name="refs")
    kind = models.CharField(max_length=32, choices=ComponentKind.choices)
    component_hash = HashField(db_index=True)
    path = models.CharField(max_length=300)

    class Meta:
        constraints = [
            # Rule: one row per reference position in a workflow.
            models.UniqueConstraint(fields=["workflow", "path"], name="workflow_ref_unique_path"),
            _hash_check("component_hash", "workflow_ref_hash_grammar"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id[:12]} {self.path} → {self.kind} {self.component_hash[:12]}"


class WorkflowDerivation(models.Model):
    """A workflow version saved in the editor from another one ("derived from"). A stored
    workflow is immutable and keyed by its content, so it cannot name its parent; the edge is
    kept here, with who saved it and why. Not content: deleting nothing, changing no hash."""

    child = models.ForeignKey(
        CognitionWorkflow, on_delete=models.PROTECT, related_name="parent_edges"
    )
    parent = models.ForeignKey(
        CognitionWorkflow, on_delete=models.PROTECT, related_name="child_edges"
    )
    operator = models.CharField(max_length=150, blank=True)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            # Rule: one edge per (version, the version it was derived from).
            models.UniqueConstraint(fields=["child", "parent"], name="workflow_derivation_unique"),
            # Rule: saving a workflow unchanged derives nothing.
            models.CheckConstraint(
                condition=~Q(child=models.F("parent")), name="workflow_derivation_not_self"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.child_id[:12]} derived from {self.parent_id[:12]}"


class CognitionProfile(models.Model):
    hash = HashField(primary_key=True)
    workflow = models.ForeignKey(
        CognitionWorkflow, on_delete=models.PROTECT, related_name="profiles"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "hash"]
        constraints = [_hash_check("hash", "cognition_profile_hash_grammar")]

    def __str__(self) -> str:
        return f"profile {self.hash[:12]}"

    def get_absolute_url(self) -> str:
        return f"/store/cognition-profiles/{self.pk}/"

    @property
    def content(self) -> dict[str, str]:
        return {"workflow_hash": self.workflow_id}


class Environment(models.Model):
    hash = HashField(primary_key=True)
    content = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "hash"]
        constraints = [
            _hash_check("hash", "environment_hash_grammar"),
            # Rule: environment text is non-empty.
            models.CheckConstraint(condition=~Q(content=""), name="environment_non_empty"),
        ]

    def __str__(self) -> str:
        first = self.content.strip().splitlines()[0] if self.content.strip() else ""
        return f"{first[:60]} {self.hash[:12]}"

    def get_absolute_url(self) -> str:
        return f"/store/environments/{self.pk}/"


class Entity(models.Model):
    hash = HashField(primary_key=True)
    content = models.JSONField()
    # Denormalized from content for lookups and listing.
    entity_id = models.CharField(max_length=200, db_index=True)
    is_agent = models.BooleanField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        verbose_name_plural = "entities"
        ordering = ["-created_at", "hash"]
        constraints = [
            _hash_check("hash", "entity_hash_grammar"),
            # Rule: entity ids follow the entity id grammar.
            models.CheckConstraint(
                condition=Q(entity_id__regex=ENTITY_ID_PATTERN), name="entity_id_grammar"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.entity_id} {self.hash[:12]}"

    def get_absolute_url(self) -> str:
        return f"/store/entities/{self.pk}/"


class Metric(models.Model):
    """A measure of a committed turn (docs/measurement.md): a JMESPath expression or an LLM judge
    over the turn view, and how a world's per-turn values aggregate."""

    hash = HashField(primary_key=True)
    # Stored with its source resolved to {"hash": …} and a judge's defaults filled in.
    content = models.JSONField()
    # Denormalized from content for listing, filtering by label and "uses".
    label = models.CharField(max_length=64, db_index=True)
    # A registered metric kind (chukwa_core/metric_kinds.py): the registry, not the database,
    # knows the kinds, so a new kind needs no migration.
    kind = models.CharField(max_length=16)
    # The LLM source the metric's kind calls (a judge's; null for an expression): a real edge,
    # so "uses" needs no JSON scan. Which kinds name one is the registry's ``source_key``.
    source = models.ForeignKey(
        ResponseSource, null=True, blank=True, on_delete=models.PROTECT, related_name="metrics"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "hash"]
        constraints = [
            _hash_check("hash", "metric_hash_grammar"),
            _label_check("label", "metric_label_grammar"),
            # Rule: a kind is a registry name (lower case, digits, "_"); which kinds exist and
            # which name a source is the registry's, checked at put.
            models.CheckConstraint(
                condition=Q(kind__regex=METRIC_KIND_PATTERN), name="metric_kind_grammar"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.label} ({self.kind}) {self.hash[:12]}"

    def get_absolute_url(self) -> str:
        return f"/store/metrics/{self.pk}/"


class Population(models.Model):
    """Agents drawn over named axes (docs/populations.md): axes, size, sampler, seed and an
    entity template; a scenario that includes it gets its agents as ordinary entities."""

    hash = HashField(primary_key=True)
    content = models.JSONField()
    # Denormalized from content for listing.
    label = models.CharField(max_length=64, db_index=True)
    size = models.IntegerField()
    sampler = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "hash"]
        constraints = [
            _hash_check("hash", "population_hash_grammar"),
            _label_check("label", "population_label_grammar"),
            models.CheckConstraint(
                condition=Q(size__gte=1, size__lte=10_000), name="population_size_range"
            ),
            models.CheckConstraint(
                condition=Q(sampler__in=["sobol", "random"]), name="population_sampler"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.label} ({self.size}, {self.sampler}) {self.hash[:12]}"

    def get_absolute_url(self) -> str:
        return f"/store/populations/{self.pk}/"


class Scenario(models.Model):
    hash = HashField(primary_key=True)
    scenario_slug = models.CharField(max_length=64, db_index=True)
    description = models.TextField()
    chronon_seconds = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "hash"]
        constraints = [
            _hash_check("hash", "scenario_hash_grammar"),
            _label_check("scenario_slug", "scenario_slug_grammar"),
            # Rule: 1 … 31,536,000 simulated seconds per turn.
            models.CheckConstraint(
                condition=Q(chronon_seconds__gte=1, chronon_seconds__lte=31_536_000),
                name="scenario_chronon_range",
            ),
            models.CheckConstraint(condition=~Q(description=""), name="scenario_description"),
        ]

    def __str__(self) -> str:
        return f"{self.scenario_slug} {self.hash[:12]}"

    def get_absolute_url(self) -> str:
        return f"/scenarios/{self.pk}/"


class ScenarioCognitionProfile(models.Model):
    scenario = models.ForeignKey(
        Scenario, on_delete=models.CASCADE, related_name="profile_bindings"
    )
    label = models.CharField(max_length=64)
    profile = models.ForeignKey(CognitionProfile, on_delete=models.PROTECT, related_name="bindings")

    class Meta:
        ordering = ["scenario", "label"]
        constraints = [
            # Rule: a label is bound once per scenario.
            models.UniqueConstraint(
                fields=["scenario", "label"], name="scenario_profile_label_unique"
            ),
            _label_check("label", "scenario_profile_label_grammar"),
        ]

    def __str__(self) -> str:
        return f"{self.label} → {self.profile_id[:12]}"


class ScenarioEnvironment(models.Model):
    scenario = models.ForeignKey(
        Scenario, on_delete=models.CASCADE, related_name="environment_bindings"
    )
    label = models.CharField(max_length=64)
    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="bindings")

    class Meta:
        ordering = ["scenario", "label"]
        constraints = [
            # Rule: a label is bound once per scenario.
            models.UniqueConstraint(
                fields=["scenario", "label"], name="scenario_environment_label_unique"
            ),
            _label_check("label", "scenario_environment_label_grammar"),
        ]

    def __str__(self) -> str:
        return f"{self.label} → {self.environment_id[:12]}"


class ScenarioEntity(models.Model):
    scenario = models.ForeignKey(Scenario, on_delete=models.CASCADE, related_name="entity_bindings")
    position = models.IntegerField()
    entity = models.ForeignKey(Entity, on_delete=models.PROTECT, related_name="bindings")

    class Meta:
        ordering = ["scenario", "position"]
        constraints = [
            # Rule: the entity list is ordered; one entity per position.
            models.UniqueConstraint(
                fields=["scenario", "position"], name="scenario_entity_position_unique"
            ),
            models.CheckConstraint(
                condition=Q(position__gte=0), name="scenario_entity_position_gte_0"
            ),
        ]

    def __str__(self) -> str:
        return f"[{self.position}] {self.entity_id[:12]}"


class ScenarioPopulation(models.Model):
    """A population a scenario included (its agents are among the scenario's entities, from
    ``first_position`` on): provenance and "uses", outside the scenario's hash."""

    scenario = models.ForeignKey(
        Scenario, on_delete=models.CASCADE, related_name="population_bindings"
    )
    position = models.IntegerField()
    population = models.ForeignKey(Population, on_delete=models.PROTECT, related_name="bindings")
    environment = models.CharField(max_length=64)
    cognition_profile = models.CharField(max_length=64)
    first_position = models.IntegerField()

    class Meta:
        ordering = ["scenario", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["scenario", "position"], name="scenario_population_position_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"[{self.position}] {self.population_id[:12]}"


class ScenarioName(models.Model):
    name = models.CharField(max_length=64, primary_key=True)
    scenario = models.ForeignKey(Scenario, on_delete=models.PROTECT, related_name="names")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [_label_check("name", "scenario_name_grammar")]

    def __str__(self) -> str:
        return f"{self.name} → {self.scenario_id[:12]}"

    def get_absolute_url(self) -> str:
        return f"/names/{self.pk}/"


class ScenarioNameHistory(models.Model):
    name = models.CharField(max_length=64, db_index=True)
    old_hash = HashField(null=True, blank=True)
    # NULL new_scenario is a tombstone: the name was unset.
    new_scenario = models.ForeignKey(
        Scenario, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    note = models.TextField(blank=True)
    operator = models.CharField(max_length=200, blank=True)
    changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "scenario name history"
        ordering = ["name", "-changed_at", "-id"]
        constraints = [_label_check("name", "scenario_name_history_grammar")]

    def __str__(self) -> str:
        target = self.new_scenario_id[:12] if self.new_scenario_id else "(unset)"
        return f"{self.name}: {(self.old_hash or '-')[:12]} → {target}"


class ScenarioDerivation(models.Model):
    child = models.ForeignKey(Scenario, on_delete=models.PROTECT, related_name="derivations")
    operator = models.CharField(max_length=200, blank=True)
    note = models.TextField(blank=True)
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"derivation {self.pk} → {self.child_id[:12]}"


class ScenarioDerivationParent(models.Model):
    derivation = models.ForeignKey(
        ScenarioDerivation, on_delete=models.CASCADE, related_name="parents"
    )
    parent = models.ForeignKey(Scenario, on_delete=models.PROTECT, related_name="child_edges")
    position = models.IntegerField()
    role = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["derivation", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["derivation", "position"], name="derivation_parent_position_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.parent_id[:12]} ({self.role or 'parent'}) → derivation {self.derivation_id}"
