"""What each MCP tool tells a model: the operation, its inputs in words, and the next step.

Keyed by the REST operation id (the tool's name). The input schemas come from the API's
serializers (``surfaces/mcp/catalog.py``); these texts add what a schema cannot say: the order in
which a scenario is authored, which hashes feed which tool, and what each answer means.
"""

from __future__ import annotations

INSTRUCTIONS = """\
Chukwa runs LLM-driven prose world simulations. Every tool is one operation of Chukwa's REST API
(same validation, same errors: a failed call returns isError with {"error": {"code", "message",
"details"}}; the message starts with the field it names).

Author a scenario piece by piece; every piece is an immutable, content-addressed component:
1. world_patch_schema_get: the hash every patch-producing node names as final_schema_ref.
2. json_schemas_put: argument/result schemas of tools and ambient sources (Draft 2020-12).
3. response_sources_put: LLM endpoints (llm_chat_completions), tools (http_json, mcp_tool).
4. cognition_workflows_put: nodes (llm_text, llm_tool_loop, rule_policy) and ambient sources;
   references are {"hash": H} (or {"inline": content}).
5. cognition_profiles_put: {"workflow": {"hash": H}} - what an agent thinks with.
6. environments_put: prose of one place.
7. entities_put: agents (kind.agent with goal, memory, cognition_profile label) and props.
8. scenario_assemble: binds profiles and environments to labels and lists the entities.
Putting the same content twice returns the same hash (was_new false). There are no defaults:
every label an entity names must be bound in the scenario.
Change a scenario with scenario_fork (only what changes; everything else is reused). Run it with
world_create, then turn_enqueue; a worker runs the queued attempts: poll attempt_get until its
status is committed or failed, then read turn_get, world_diff, source_invocation_get and
llm_call_get. Writes need an operator's token; readers see the read tools only.
Measure worlds with metrics (metrics_put: a JMESPath expression over a turn's view, or an LLM
judge), then measurement_request and measurement_list; metric_agreement compares a metric with
reviewers' annotations of the same turns.
"""

_PAGING = " Paged: limit (1…200, default 50) and offset; the answer has count, limit, offset."

# Each component kind: (singular, plural) and what its content is, for its put tool.
_KIND_CONTENT = {
    "json_schemas": (
        ("a JSON Schema", "JSON Schemas"),
        'content is a Draft 2020-12 JSON Schema object, e.g. {"type": "object", "properties": '
        '{"text": {"type": "string"}}, "required": ["text"]}. $ref may point only inside the '
        "same document (#…). Used as a tool's arguments_schema_ref/result_schema_ref and an "
        "ambient source's result_schema_ref.",
    ),
    "response_sources": (
        ("a response source", "response sources"),
        'content is {"version": 1, "label": L, "interface": {...}}. interface.name is '
        '"llm_chat_completions" (model, base_url_env "CHUKWA_LLM_BASE_URL", api_key_env '
        '"CHUKWA_LLM_API_KEY", schema_delivery "response_format" or "prompt_only", timeout_ms, '
        'params, and optionally provider, e.g. "openai" or "ollama", the name trace viewers '
        'show as the backend), "http_json" (method, url_env "CHUKWA_<X>_URL", path, timeout_ms) or '
        '"mcp_tool" (url_env, tool, timeout_ms). URLs and keys are environment variable names, '
        "never values. Workflows name it as llm_source_ref or a tool's source_ref.",
    ),
    "cognition_workflows": (
        ("a cognition workflow", "cognition workflows"),
        'content is {"version": 1, "execution": "per_subject_ordered" | "concurrent", '
        '"ambient_sources": [...], "nodes": [...], "apply": {"from": "<node id>.final"}}. '
        "Node types: llm_text (llm_source_ref, prompt_template.messages, "
        "max_generation_attempts), llm_tool_loop (also available_tools [{name, description, "
        "source_ref, arguments_schema_ref, result_schema_ref}], max_tool_calls, "
        "final_schema_ref = the WorldPatch schema's hash), rule_policy (rules). Prompt "
        "placeholders: {{world.projection}}, {{environment.rendered}}, {{subject.rendered}}, "
        "{{subject.id}}, {{subject.memory}}, {{ambient.visible}}, {{tools.available}}, "
        "{{world.turn}}, {{world.attempted_turn}}, {{world.simulation_time}}, "
        '{{nodes.<id>.output}}. Every *_ref is {"hash": H} or {"inline": content}; the '
        "stored workflow holds hashes only. Validated at put (never calls a source).",
    ),
    "cognition_profiles": (
        ("a cognition profile", "cognition profiles"),
        'content is {"workflow": {"hash": H}} (or {"workflow": {"inline": <workflow>}}); it is '
        'stored as {"workflow_hash": H}. A scenario binds profiles to labels, and an agent '
        "names its profile's label.",
    ),
    "environments": (
        ("an environment", "environments"),
        "content is the prose of one place (a non-empty string, at most 64 KiB). A scenario "
        "binds environments to labels, and every entity names its environment's label.",
    ),
    "entities": (
        ("an entity", "entities"),
        'content is {"id", "name", "state", "environment": <label>, "kind": "prop" | {"agent": '
        '{"goal", "memory", "cognition_profile": <label>}}}. The id is normalized (trimmed, '
        "lowercased, spaces to _) before hashing; labels are resolved by the scenario.",
    ),
    "metrics": (
        ("a metric", "metrics"),
        'content is {"version": 1, "label": L, "kind": "expression" | "llm_judge", "aggregate": '
        '"any" | "all" | "sum" | "mean" | "min" | "max" | "last", …}. An expression has '
        '"expression": a JMESPath expression over the turn view (world, turn, simulation_time, '
        "entities {id: {kind, environment, state, memory}}, environments {label: {content}}, "
        "patches [{subject, narration, effects}], calls [{subject, source, kind, status}], "
        "tokens, cost) whose result is a number or a boolean, e.g. "
        "\"length(calls[?source=='use_drinking_fountain' && status=='succeeded']) > `0`\". An "
        'llm_judge has source ({"hash": H} of an llm_chat_completions source, or inline), '
        "system, user_template (placeholders {{turn}} and {{turn.<key>}}; with subject, "
        "{{subject.id}}, {{subject.rendered}}, {{subject.memory}}, {{environment.rendered}}), "
        "scale {min, max} with min < max, optional subject (an agent id) and "
        "max_generation_attempts (1…5, default 1). Measure worlds with measurement_request.",
    ),
    "populations": (
        ("a population", "populations"),
        'content is {"version": 1, "label": L, "size": 1…10000, "sampler": "sobol" | "random", '
        '"seed": n, "axes": [{"name", "categories": [{"value", "weight"}]} or {"name", "range": '
        '[low, high], "integer"?, "marginal"?: [{"low", "high", "share"}]}], "entity_template": '
        '{"id", "name", "state", "goal", "memory"}} with {{index}} (1…size) and '
        "{{axes.<name>}} in the template. A scenario includes it in populations [{ref, "
        "environment, cognition_profile}] and gets its agents as entities, drawn "
        "deterministically (same content, same agents, same scenario hash). See "
        "populations_coverage for its coverage and marginals; populations_biographies to "
        "have an LLM source write a biography per agent ({{biography}} in the template).",
    ),
}


def _component_descriptions() -> dict[str, str]:
    texts: dict[str, str] = {}
    for segment, ((what, plural), content) in _KIND_CONTENT.items():
        texts[f"{segment}_put"] = (
            f"Store {what} (content-addressed, immutable) and return its hash. {content} "
            "Returns {hash, was_new}; the same content always gives the same hash."
        )
        texts[f"{segment}_get"] = (
            f"Read {what} by its hash (64 lowercase hex): its stored content and created_at."
        )
        texts[f"{segment}_list"] = f"List stored {plural}, newest first.{_PAGING}"
        texts[f"{segment}_uses"] = (
            f"What uses {what} (by hash): the workflows, cognition profiles and scenarios that "
            "reference it (to see what a change to it would touch)."
        )
    texts["response_sources_uses"] += " For an LLM source, also the judge metrics using it."
    texts["metrics_uses"] = (
        "What a metric (by hash) measured: the worlds with how many turns and errors, and "
        "their scenarios."
    )
    texts["populations_coverage"] = (
        "A population's coverage (by hash): the centered L2-discrepancy of its sample in the "
        "unit cube (scipy.stats.qmc; lower is more even), each axis's shares against its "
        "target (category weights or marginal bins), and its first agents as rendered."
    )
    texts["populations_biographies"] = (
        "Have an LLM source write one biography per agent of a population (by hash): source "
        '({"hash": H} or {"label": L} of a stored llm_chat_completions source), prompt (asked '
        "once per agent, with {{index}} and {{axes.<name>}}), optional entity_template for the "
        "new version (it may use {{biography}}), optional budget. Checked whole first (an "
        "error names the field), then queued for a worker: returns the run {id, status, done, "
        "agents}; read it with biography_run_read until its status is completed (result: "
        "{hash, derived_from, agents, llm_calls, cost}, the new version, whose {{biography}} "
        "scenarios render from the stored texts) or failed (error, nothing stored). Each call "
        "is traced (kind biography, no world). Operators only."
    )
    texts["biography_run_read"] = (
        "A biographies run by id: status (queued, running, completed, failed), done of agents "
        "so far, then result (the new population version) or error."
    )
    return texts


TOOL_DESCRIPTIONS: dict[str, str] = {
    **_component_descriptions(),
    # --- scenarios ---
    "scenario_assemble": (
        "Assemble a scenario from its parts. scenario_slug (label), description, "
        'chronon_seconds (simulated seconds per turn), cognition_profiles {label: {"hash": H} '
        '| {"inline": profile}}, environments {label: {"hash": H} | {"inline": text}}, '
        'entities [{"hash": H} | {"inline": entity}, …] with at least one agent; optional name '
        "(set this scenario name too), operator, note, metadata. Every entity's environment and "
        "every agent's cognition_profile must be a bound label. Returns scenario_hash, "
        "was_new_scenario, the component hashes by label, new_components and derivation_id."
    ),
    "scenario_fork": (
        'Derive a new scenario from primary_parent ({"name": N} or {"hash": H}) with only '
        "the changes given: changes.scenario_slug, description, chronon_seconds, "
        "cognition_profile_upserts {label: ref}, cognition_profile_removals [label], "
        "environment_upserts {label: ref}, environment_removals [label], entities (replaces "
        "the whole list). Everything not changed is reused: changing one byte of one workflow "
        "makes exactly one new workflow, one new profile and one new scenario. Optional "
        "additional_parents [{hash, role}], name, operator, note, metadata. Same answer as "
        "scenario_assemble."
    ),
    "scenario_list": (
        "List scenarios, newest first, with their names and child/world counts. Filters: "
        "created_after, created_before, has_name, has_parents, uses_<kind>_hash (e.g. "
        f"uses_cognition_workflow_hash).{_PAGING}"
    ),
    "scenario_get": (
        "Read a scenario by hash or by name (ref): its full content (profiles with their "
        "workflows, environments, entities), the component hashes by label, its names and its "
        "derivations (how it was assembled or forked)."
    ),
    "scenario_lineage": (
        "A scenario's ancestors and descendants (by hash or name): nodes and parent→child edges "
        "with the derivation that made each, oldest first."
    ),
    "scenario_name_get": (
        "Read a scenario name: the hash it points to now (null when unset), that scenario's "
        "summary and the name's history of changes."
    ),
    "scenario_name_set": (
        "Point a scenario name (label) at a scenario hash. expected_current_hash makes it a "
        "compare-and-set (null: the name must be unset now); a mismatch is 409 cas_failed. "
        "Optional note and operator are kept in the name's history."
    ),
    "scenario_name_unset": (
        "Unset a scenario name (a tombstone is kept in its history). Optional "
        "expected_current_hash (compare-and-set), note, operator."
    ),
    "world_patch_schema_get": (
        "The WorldPatch JSON Schema (what every patch-producing node's final output must be) "
        "and its hash: use the hash as final_schema_ref in llm_tool_loop nodes."
    ),
    # --- worlds and turns ---
    "world_create": (
        "Create a world (a running copy of a scenario) at turn 0. slug (label, unique), "
        'scenario_ref {"name": N} | {"hash": H} | {"data": <scenario_assemble input>}; '
        "optional name, start_time (ISO 8601 with offset; default now), budget, replay_from "
        "{world, mode}, seed (0 ≤ seed < 2^53: the same scenario, start time and seed on a "
        "deterministic backend give the same run), branch_from {world, turn} (start at a "
        "committed turn of another world with a copy of its state; scenario_ref then defaults "
        "to that world's and must have its entity ids, kinds and environment labels), reuse "
        "exact|off (default off; exact: an LLM call whose whole request equals a recorded "
        "succeeded call's is answered from it, nothing sent). Returns "
        "the world with its state at its first turn."
    ),
    "source_invocation_list": (
        "Every source call of every world, newest first: LLM generations, ambient sources, "
        "tool calls (with their arguments) and conformance checks. Filters: kind, source (a "
        "source's label or a tool's name), subject, status, world, since, until."
        f"{_PAGING}"
    ),
    "attempt_retry": (
        "Retry the failed or interrupted attempt (attempt_id) that ended its world's last batch: "
        "its turn and the turns the batch had left are queued again as a new batch (returns "
        "batch_id and attempt_ids). Refused (409) while anything of the world is queued or "
        "running, or for an attempt that did not end the last batch. While the failure's cause "
        "is still there it warns instead (409 intervention_still_pending or "
        "experiment_budget_exhausted); force: true queues it anyway."
    ),
    "intervention_list": (
        "List a world's interventions (operator patches joining a turn), pending and consumed."
    ),
    "intervention_create": (
        "Add an intervention to a world: patch (a WorldPatch, see world_patch_schema_get), "
        "optional note and turn (default: the next turn that has not started). It is applied "
        "as that turn's first patch before any agent thinks; if its targets do not fit, the "
        "attempt fails with intervention_invalid and it stays pending."
    ),
    "intervention_delete": (
        "Delete a pending intervention of a world (intervention_id); a consumed one cannot be."
    ),
    "world_list": f"List worlds, newest first; optional scenario (hash) filter.{_PAGING}",
    "world_get": (
        "Read a world by slug: current turn, simulation time, state, scenario snapshot, "
        "queued/running attempt counts, recent attempts, budget, cost and the metrics it was "
        "measured with."
    ),
    "world_delete": (
        "Delete a world and its turns (a deleted-world record is kept; scenarios are untouched)."
    ),
    "turn_enqueue": (
        "Queue turns for a world: count (1…, default 1) turn attempts, run in order by a worker; "
        "a failure cancels the rest of the batch. Returns batch_id and attempt_ids; read each "
        "with attempt_get (status queued → running → committed | failed | interrupted | "
        "cancelled)."
    ),
    "turn_get": (
        "Read committed turn number of a world: its state snapshot, simulation time, the "
        "accepted patches with narrations, per-effect transitions, the attempt that made it "
        "and its cost."
    ),
    "world_diff": (
        "What changed in a world between turn from and turn to: entity states, memories and "
        "environments, before and after."
    ),
    "world_compare": (
        "Compare two worlds turn by turn (slug and other): the first divergent turn and, per "
        f"turn, the entities and environments that differ.{_PAGING}"
    ),
    "world_budget_get": "A world's budget (token and cost limits) in force and its history.",
    "world_budget_put": (
        "Replace a world's budget: max_tokens_per_turn, max_cost_per_turn, max_tokens_total, "
        "max_cost_total (limits left out are lifted). Applies from the next attempt."
    ),
    # --- experiments ---
    "experiment_create": (
        "Run an experiment: slug, arms [{label, scenario_ref {name|hash}, interventions? "
        "[{turn, patch, note?}]}], replicates, turns (1…100), metrics [metric refs], control? "
        "(default the first arm), seed?, start_time?, budget? {max_cost_total?, "
        "max_tokens_total?} (one total over all its worlds and judges), branch_from? "
        "{world, turn}, replay_from? {experiment, mode replay_strict|replay_then_live} (each "
        "world replays the same arm and replicate there), reuse? exact|off (default exact: "
        "a request already answered is not sent again, so the arms of a replicate share "
        "replies until their requests differ). Creates arms × "
        "replicates worlds "
        "<slug>--<arm>--<i>, replicate i seeded alike in every arm (paired), queues the turns "
        "and measures every world at turn 0 and as each turn commits. Everything is checked "
        "first: a bad design writes nothing. Follow it with experiment_get and "
        "experiment_results."
    ),
    "experiment_estimate": (
        "Price an experiment's design before running it (the same body as experiment_create): "
        "the most LLM calls it could make, completion tokens (a bound) and prompt tokens "
        "(estimated), the cost at today's prices, whether it fits its budget, and the "
        "expected wall time (seconds, from the models' observed latency, with its basis; null "
        "before a call of a model has been recorded). Writes nothing."
    ),
    "experiment_list": (
        "Every experiment, newest first: status, progress and failed worlds (as "
        "experiment_get counts them), arms, replicates, turns, tokens and cost."
    ),
    "experiment_get": (
        "An experiment (slug): its design, status (running, completed, failed: some world "
        "stopped short, cancelled), progress (worlds, turns and measurements done of planned), "
        "tokens, cost, its budget with what is spent and reserved, and failed worlds."
    ),
    "experiment_results": (
        "An experiment's results (slug): per metric and arm n, n_missing, mean, sd and a 95% "
        "CI, per turn and each world's value; per treatment arm the paired difference from "
        "control with a bootstrap CI and a sign-flip permutation p-value, each method named; "
        "with people's values uploaded, per arm the distance from them (people: mean "
        "difference with Welch's CI, Kolmogorov-Smirnov D and p, Wasserstein with a bootstrap CI)."
    ),
    "experiment_references_upload": (
        "Upload people's observed values to an experiment (slug) as a reference: rows "
        "[{unit, metric (a metric label of the experiment), value}] or csv (the text of a CSV "
        "with the header unit,metric,value). Checked whole: a bad row is a 400 naming it and "
        "nothing is written; a unit already holding a value of the metric is a 409. The "
        "results then show, per metric and arm, the distance from the people."
    ),
    "interview_create": (
        'Interview a world\'s agents (slug) about a committed turn: turn n, subjects "all" or '
        "[agent ids], questions [text], source {hash} of an llm_chat_completions source. Each "
        "agent answers in its own view of that turn, one conversation holding every question; "
        "each answer is a traced call. Queued (202) and run by a worker on a throwaway branch: "
        "poll interview_list until status is completed or failed. Nothing of the world changes: "
        "it carries the world's state_hash_before and state_hash_after (equal) and unchanged."
    ),
    "interview_list": (
        "A world's interviews (slug), newest first: turn, subjects, questions, answers "
        "[{subject, question, answer, llm_call}], status (queued, running, completed, failed), "
        "tries, and the state hashes before and after."
    ),
    "experiment_references_list": (
        "The people's values uploaded to an experiment (slug): unit, metric label and hash, value."
    ),
    "experiment_references_delete": (
        "Delete every people's value uploaded to an experiment (slug), to upload them again."
    ),
    "experiment_add_replicates": (
        "Add replicates to every arm of an experiment (slug): count. Their seeds continue the "
        "experiment's (replicate R+1…), their turns are queued and they are measured like the "
        "first; at most 1,000 worlds in all."
    ),
    "experiment_add_metrics": (
        "Add metrics to an experiment (slug): metrics [metric refs]. Every turn its worlds "
        "committed is measured with them (202), and every turn they commit from now on."
    ),
    "experiment_cancel": (
        "Cancel an experiment (slug): its queued turns are cancelled; what runs ends as it "
        "would have."
    ),
    # --- measurements ---
    "measurement_request": (
        'Measure a world (slug) with metrics: metrics [{"hash": H} | {"label": L}] (a '
        "label names its newest version). Answers 202 at once; a worker then writes one "
        "measurement per committed turn (turn 0 included) and metric that has none yet, so "
        "asking again writes nothing new. Read them with measurement_list."
    ),
    "metric_try": (
        "Try a metric before storing it: content (as metrics_put takes it), world (slug), turn "
        "(a committed turn). Answers value or error {code, message} — what it would record on "
        "that turn — and the turn view it read; writes nothing. For an llm_judge, the messages "
        "it would send; the judge is called only with ask: true (one call traced as a try, "
        "counted against the world's budget)."
    ),
    "measurement_list": (
        "A world's measurements: per metric and turn, a value or an error (code: metric_null, "
        "metric_type, metric_error, subject_not_agent) and when it was measured; optional "
        "metric (a hash, or a label for all its versions)."
    ),
    "metric_agreement": (
        "How a metric (hash) agrees with reviewers' annotations named annotation on the same "
        "turns, a turn one unit (its reviewers' mean): n turns, Spearman's rho with its "
        "permutation p (exact up to 9 turns), quadratic-weighted Cohen's kappa when metric and "
        "labels share an integer scale (else the reason), Krippendorff's alpha over every "
        "rater, each with a bootstrap interval resampled by world."
    ),
    # --- attempts and traces ---
    "attempt_get": (
        "Read a turn attempt by id: status, the turn it attempted or produced, failure "
        "(step, subject, reason), its events (ambient results, node outputs, patches, "
        "retries) and its source invocations (LLM calls and tool calls, each with an id for "
        "source_invocation_get / llm_call_get) and cost."
    ),
    "source_invocation_get": (
        "Read one source invocation (an ambient source, tool or LLM call) by id: request, "
        "response, status, duration, validation errors and failure (secrets are redacted)."
    ),
    "llm_call_get": (
        "Read one LLM call by id: the messages sent, the model's raw and normalized text, "
        "streamed chunks, finish reason, token usage, parse errors and cost."
    ),
    "attempt_list": (
        "Find turn attempts across worlds, newest first (e.g. every failed one): filters status, "
        f"world, subject (an entity id), model, since, until.{_PAGING}"
    ),
    "llm_call_list": (
        "Find LLM calls across worlds, newest first: filters status, world, subject, model, "
        f"since, until; each row has the call id for llm_call_get.{_PAGING}"
    ),
    "turn_list": f"A world's committed turns, with their narrations in brief.{_PAGING}",
    # --- review: prices and annotations ---
    "model_price_list": "The model price table (per million tokens) with its history.",
    "model_price_put": (
        "Set the price of a model at an LLM endpoint (url_env, model, input/output/cached "
        "prices per million tokens); the history is kept."
    ),
    "annotation_list": (
        "List annotations (reviewers' labels, numbers or flags on attempts, turns and LLM "
        f"calls); filters target_kind, world, turn, attempt, llm_call, name, value, author.{_PAGING}"
    ),
    "annotation_create": (
        "Annotate an attempt, a turn or an LLM call: target, name (label), value (a label, a "
        "number or true/false) and an optional comment. Any signed-in user may annotate."
    ),
    "annotation_get": "Read one annotation by id.",
    "annotation_update": (
        "Replace an annotation's name, value and comment (its author or an operator only)."
    ),
    "annotation_delete": "Delete an annotation (its author or an operator only).",
}
