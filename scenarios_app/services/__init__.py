"""Writes to the scenario store. Every entry point owns one transaction."""

from scenarios_app.services.assembly import scenario_assemble, scenario_assemble_within
from scenarios_app.services.components import (
    PUT_BY_KIND,
    PutResult,
    cognition_profile_put,
    cognition_workflow_put,
    component_put,
    entity_put,
    environment_put,
    json_schema_put,
    metric_put,
    population_put,
    response_source_put,
)
from scenarios_app.services.drafts import metric_draft, nothing_stored, workflow_draft
from scenarios_app.services.forks import scenario_fork
from scenarios_app.services.manifest import (
    AssembleResult,
    ScenarioAssembleInput,
    ScenarioForkInput,
)
from scenarios_app.services.names import UNSET, NameResult, scenario_name_set, scenario_name_unset
from scenarios_app.services.workflow_versions import DeriveResult, cognition_workflow_derive

__all__ = [
    "PUT_BY_KIND",
    "UNSET",
    "AssembleResult",
    "DeriveResult",
    "NameResult",
    "PutResult",
    "ScenarioAssembleInput",
    "ScenarioForkInput",
    "cognition_profile_put",
    "cognition_workflow_derive",
    "cognition_workflow_put",
    "component_put",
    "entity_put",
    "environment_put",
    "json_schema_put",
    "metric_draft",
    "metric_put",
    "nothing_stored",
    "population_put",
    "response_source_put",
    "scenario_assemble",
    "scenario_assemble_within",
    "scenario_fork",
    "scenario_name_set",
    "scenario_name_unset",
    "workflow_draft",
]
