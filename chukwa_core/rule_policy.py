"""The ``rule_policy`` node: deterministic, LLM-free cognition. Pure: no Django.

perception → intent (the first authored rule whose conditions hold, optionally with a seeded
probability) → plan (the rule's steps, as WorldPatch effects) → memory (one experience line) →
an observable inner monologue. Identical world state, ambient context, workflow and seed give an
identical patch.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chukwa_core.component_validation import check_keys, require_label, require_object, type_name
from chukwa_core.errors import invalid
from chukwa_core.ids import is_entity_id, is_label
from chukwa_core.patch_schema import PATCH_OPS
from chukwa_core.pointers import pointer_get
from chukwa_core.prompt_templates import PLACEHOLDER_RE
from chukwa_core.seeds import rule_seed
from chukwa_core.workflow_refs import NodeCheck, validate_tools
from chukwa_core.world_state import WorldState, memory_of

TEXT_CONDITIONS = {
    "subject_state_contains": ("text",),
    "subject_state_not_contains": ("text",),
    "subject_memory_contains": ("text",),
    "subject_memory_not_contains": ("text",),
    "entity_perceived": ("entity_id",),
    "entity_not_perceived": ("entity_id",),
    "entity_state_contains": ("entity_id", "text"),
    "entity_state_not_contains": ("entity_id", "text"),
    "ambient_present": ("pointer",),
    "ambient_equals": ("pointer", "value"),
    "ambient_contains": ("pointer", "text"),
}
TEMPLATE_NAMES = frozenset(
    {
        "subject.id",
        "subject.name",
        "subject.environment",
        "world.turn",
        "world.attempted_turn",
        "world.simulation_time",
        "rule.id",
    }
)
SUBJECT_ID = "{{subject.id}}"
SUBJECT_ENVIRONMENT = "{{subject.environment}}"
RULE_FIELDS = ("id", "when", "intent", "plan", "memory", "narration")


# --- validation (joins the store's workflow validator) -------------------------------------


_TOOL_RESULT = re.compile(r"tool\.result(\.[A-Za-z0-9_-]+)?")


def _check_template(value: Any, fieldname: str, *, allow_tool: bool = False) -> str:
    if not isinstance(value, str) or not value.strip():
        raise invalid("invalid_template", fieldname, "must be a non-empty string template")
    for match in PLACEHOLDER_RE.finditer(value):
        name = match.group(1)
        if name in TEMPLATE_NAMES or (allow_tool and _TOOL_RESULT.fullmatch(name)):
            continue
        known = ", ".join("{{" + n + "}}" for n in sorted(TEMPLATE_NAMES))
        if allow_tool:
            known += ", {{tool.result}}, {{tool.result.<key>}}"
        else:
            known += " ({{tool.result…}} only in a rule with a tool_call)"
        raise invalid(
            "invalid_template", fieldname, f"unknown placeholder {{{{{name}}}}}; known: {known}"
        )
    if "{{" in PLACEHOLDER_RE.sub("", value) or "}}" in PLACEHOLDER_RE.sub("", value):
        raise invalid("invalid_template", fieldname, "has an unbalanced {{ or }}")
    return value


def _check_pointer(value: Any, fieldname: str) -> None:
    if not isinstance(value, str) or not value.startswith("/ambient/"):
        raise invalid(
            "invalid_condition", fieldname, f"must be a JSON pointer under /ambient/, got {value!r}"
        )


def _validate_condition(condition: Any, fieldname: str) -> None:
    cond = require_object(condition, fieldname, "invalid_condition")
    kind = cond.get("kind")
    if kind not in TEXT_CONDITIONS:
        raise invalid(
            "unknown_condition_kind",
            f"{fieldname}.kind",
            f"{kind!r} is not a condition kind; known: {', '.join(sorted(TEXT_CONDITIONS))}",
        )
    check_keys(cond, fieldname, required=("kind", *TEXT_CONDITIONS[kind]), code="invalid_condition")
    if "text" in cond and (not isinstance(cond["text"], str) or not cond["text"].strip()):
        raise invalid("invalid_condition", f"{fieldname}.text", "must be a non-empty string")
    if "entity_id" in cond and not is_entity_id(cond["entity_id"]):
        raise invalid(
            "invalid_condition",
            f"{fieldname}.entity_id",
            f"{cond['entity_id']!r} is not an entity id",
        )
    if "pointer" in cond:
        _check_pointer(cond["pointer"], f"{fieldname}.pointer")


def _validate_step(step: Any, fieldname: str, allow_tool: bool = False) -> None:
    effect = require_object(step, fieldname, "invalid_plan_step")
    op = effect.get("op")
    if op not in PATCH_OPS:
        raise invalid(
            "invalid_plan_step",
            f"{fieldname}.op",
            f"{op!r} is not a WorldPatch op; valid ops: {', '.join(PATCH_OPS)}",
        )
    if op == "set_environment_content":
        check_keys(
            effect,
            fieldname,
            required=("op", "environment_label", "content"),
            code="invalid_plan_step",
        )
        label = effect["environment_label"]
        if label != SUBJECT_ENVIRONMENT and not is_label(label):
            raise invalid(
                "invalid_plan_step",
                f"{fieldname}.environment_label",
                f"{label!r} must be an environment label or {SUBJECT_ENVIRONMENT}",
            )
        _check_template(effect["content"], f"{fieldname}.content", allow_tool=allow_tool)
        return
    text_key = "state" if op == "set_entity_state" else "content"
    check_keys(effect, fieldname, required=("op", "entity_id", text_key), code="invalid_plan_step")
    entity_id = effect["entity_id"]
    if entity_id != SUBJECT_ID and not is_entity_id(entity_id):
        raise invalid(
            "invalid_plan_step",
            f"{fieldname}.entity_id",
            f"{entity_id!r} must be an entity id or {SUBJECT_ID}",
        )
    _check_template(effect[text_key], f"{fieldname}.{text_key}", allow_tool=allow_tool)


def _validate_tool_call(value: Any, fieldname: str, tool_names: set[str]) -> None:
    call = require_object(value, fieldname, "invalid_tool_call")
    check_keys(call, fieldname, required=("tool", "arguments"), code="invalid_tool_call")
    if call["tool"] not in tool_names:
        raise invalid(
            "invalid_tool_call",
            f"{fieldname}.tool",
            f"{call['tool']!r} is not one of this node's available_tools "
            f"({', '.join(sorted(tool_names)) or 'none'})",
        )
    arguments = require_object(call["arguments"], f"{fieldname}.arguments", "invalid_tool_call")

    def walk(item: Any, where: str) -> None:
        if isinstance(item, str):
            _check_template(item, where)
        elif isinstance(item, dict):
            for key, sub in item.items():
                walk(sub, f"{where}.{key}")
        elif isinstance(item, list):
            for index, sub in enumerate(item):
                walk(sub, f"{where}[{index}]")

    walk(arguments, f"{fieldname}.arguments")


def validate_rule_policy_node(node: Mapping[str, Any], fieldname: str, check: NodeCheck) -> None:

    check_keys(
        node,
        fieldname,
        required=("id", "type", "rules"),
        optional=("available_tools",),
        code="invalid_node",
    )
    tool_names = set(
        validate_tools(
            node.get("available_tools", []), f"{fieldname}.available_tools", check.lookup
        )
    )
    rules = node["rules"]
    if not isinstance(rules, list) or not rules:
        raise invalid("invalid_rule", f"{fieldname}.rules", "must be a non-empty array of rules")
    seen: set[str] = set()
    for index, raw in enumerate(rules):
        where = f"{fieldname}.rules[{index}]"
        rule = require_object(raw, where, "invalid_rule")
        check_keys(
            rule,
            where,
            required=RULE_FIELDS,
            optional=("probability", "tool_call"),
            code="invalid_rule",
        )
        require_label(rule["id"], f"{where}.id", "invalid_rule")
        if rule["id"] in seen:
            raise invalid(
                "duplicate_rule_id", f"{where}.id", f"rule id {rule['id']!r} is used twice"
            )
        seen.add(rule["id"])
        if not isinstance(rule["when"], list):
            raise invalid(
                "invalid_rule", f"{where}.when", f"must be an array, got {type_name(rule['when'])}"
            )
        for c_index, condition in enumerate(rule["when"]):
            _validate_condition(condition, f"{where}.when[{c_index}]")
        if "probability" in rule:
            p = rule["probability"]
            if isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p <= 1:
                raise invalid(
                    "invalid_probability",
                    f"{where}.probability",
                    f"must be a number in (0, 1], got {p!r}",
                )
        has_tool = "tool_call" in rule
        if has_tool:
            _validate_tool_call(rule["tool_call"], f"{where}.tool_call", tool_names)
        _check_template(rule["intent"], f"{where}.intent")
        _check_template(rule["memory"], f"{where}.memory", allow_tool=has_tool)
        _check_template(rule["narration"], f"{where}.narration", allow_tool=has_tool)
        if not isinstance(rule["plan"], list):
            raise invalid(
                "invalid_rule", f"{where}.plan", f"must be an array, got {type_name(rule['plan'])}"
            )
        for s_index, step in enumerate(rule["plan"]):
            _validate_step(step, f"{where}.plan[{s_index}]", allow_tool=has_tool)
    last = rules[-1]
    if last["when"] or "probability" in last:
        raise invalid(
            "rule_policy_no_fallback",
            f"{fieldname}.rules[{len(rules) - 1}]",
            "the last rule must have no conditions and no probability, so that some rule "
            "always decides (there is no implicit default)",
        )


def rule_policy_references(workflow: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(field path, "entity" | "environment", id) for every concrete id a rule policy names;
    the scenario validator checks each against the scenario."""
    refs: list[tuple[str, str, str]] = []
    for n_index, node in enumerate(workflow.get("nodes", [])):
        if not isinstance(node, dict) or node.get("type") != "rule_policy":
            continue
        for r_index, rule in enumerate(node.get("rules", [])):
            base = f"nodes[{n_index}].rules[{r_index}]"
            for c_index, cond in enumerate(rule.get("when", [])):
                if "entity_id" in cond:
                    refs.append((f"{base}.when[{c_index}].entity_id", "entity", cond["entity_id"]))
            for s_index, step in enumerate(rule.get("plan", [])):
                if step.get("entity_id") not in (None, SUBJECT_ID):
                    refs.append((f"{base}.plan[{s_index}].entity_id", "entity", step["entity_id"]))
                if step.get("environment_label") not in (None, SUBJECT_ENVIRONMENT):
                    refs.append(
                        (
                            f"{base}.plan[{s_index}].environment_label",
                            "environment",
                            step["environment_label"],
                        )
                    )
    return refs


# --- evaluation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleContext:
    world_slug: str
    turn: int
    attempted_turn: int
    simulation_time: str
    ambient: Mapping[str, Any]
    # the world's seed (chukwa_core.seeds); None: the draws come from the slug, as before seeds
    world_seed: int | None = None


@dataclass(frozen=True)
class RuleOutcome:
    patch: dict[str, Any]
    monologue: dict[str, Any]
    content_hash: str
    rule_id: str


def seed_for(ctx: RuleContext, subject_id: str, node_id: str) -> int:
    """The seed of a rule node's draws: from the world's seed when it has one, else from its
    slug (so an unseeded world behaves exactly as before seeds existed)."""
    if ctx.world_seed is not None:
        return rule_seed(ctx.world_seed, ctx.attempted_turn, subject_id, node_id)
    material = "\x1f".join([ctx.world_slug, str(ctx.attempted_turn), subject_id, node_id])
    return int.from_bytes(hashlib.sha256(material.encode("utf-8")).digest()[:8], "big")


def _holds(
    cond: Mapping[str, Any],
    subject: dict[str, Any],
    perceived: dict[str, dict[str, Any]],
    ambient: Mapping[str, Any],
) -> bool:
    kind = cond["kind"]
    text = cond.get("text", "").lower()
    if kind.startswith("subject_state"):
        found = text in subject["state"].lower()
        return not found if kind.endswith("not_contains") else found
    if kind.startswith("subject_memory"):
        found = text in memory_of(subject).lower()
        return not found if kind.endswith("not_contains") else found
    if kind == "entity_perceived":
        return cond["entity_id"] in perceived
    if kind == "entity_not_perceived":
        return cond["entity_id"] not in perceived
    if kind in ("entity_state_contains", "entity_state_not_contains"):
        entity = perceived.get(cond["entity_id"])
        if entity is None:
            return False  # entity conditions only see what the subject perceives
        found = text in entity["state"].lower()
        return not found if kind == "entity_state_not_contains" else found
    present, value = pointer_get({"ambient": ambient}, cond["pointer"])
    if kind == "ambient_present":
        return present
    if kind == "ambient_equals":
        return present and _json_equal(value, cond["value"])
    return present and isinstance(value, str) and text in value.lower()


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: unlike Python's ==, true is not 1 (numbers still compare by value)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_json_equal, a, b))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


class ToolResultMissing(Exception):
    """A template names a key the tool's result does not have."""


def _render(template: str, values: Mapping[str, str]) -> str:
    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ToolResultMissing(
                f"template placeholder {{{{{name}}}}} has no value: the tool result lacks it"
            )
        return values[name]

    return PLACEHOLDER_RE.sub(lookup, template)


def _render_json(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _render(value, values)
    if isinstance(value, dict):
        return {k: _render_json(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_render_json(v, values) for v in value]
    return value


ToolCaller = Callable[[Mapping[str, Any], dict[str, Any]], Any]


def evaluate_rule_policy(
    node: Mapping[str, Any],
    world: WorldState,
    subject_id: str,
    ctx: RuleContext,
    call_tool: ToolCaller | None = None,
) -> RuleOutcome:
    subject = world.entities[subject_id]
    perceived_list = world.co_located(subject_id)
    perceived = {e["id"]: e for e in perceived_list}
    rng = random.Random(seed_for(ctx, subject_id, node["id"]))
    considered: list[dict[str, Any]] = []
    chosen: Mapping[str, Any] | None = None
    for rule in node["rules"]:
        entry: dict[str, Any] = {"rule": rule["id"]}
        failed = next(
            (
                i
                for i, c in enumerate(rule["when"])
                if not _holds(c, subject, perceived, ctx.ambient)
            ),
            None,
        )
        entry["conditions_held"] = failed is None
        if failed is not None:
            entry["failed_condition"] = failed
            considered.append(entry)
            continue
        if "probability" in rule:
            draw = rng.random()
            entry.update(
                {
                    "probability": rule["probability"],
                    "draw": draw,
                    "fired": draw < rule["probability"],
                }
            )
            considered.append(entry)
            if not entry["fired"]:
                continue
        else:
            considered.append(entry)
        chosen = rule
        break
    if chosen is None:  # unreachable: validation requires an unconditional last rule
        raise RuntimeError("rule policy decided nothing despite its fallback rule")
    values = {
        "subject.id": subject_id,
        "subject.name": subject["name"],
        "subject.environment": subject["environment"],
        "world.turn": str(ctx.turn),
        "world.attempted_turn": str(ctx.attempted_turn),
        "world.simulation_time": ctx.simulation_time,
        "rule.id": chosen["id"],
    }
    tool_record: dict[str, Any] | None = None
    if "tool_call" in chosen:
        tools = {t["name"]: t for t in node.get("available_tools", [])}
        spec = tools[chosen["tool_call"]["tool"]]
        arguments = _render_json(chosen["tool_call"]["arguments"], values)
        if call_tool is None:
            raise ToolResultMissing("this rule calls a tool, but no source layer is available")
        result = call_tool(spec, arguments)
        values["tool.result"] = json.dumps(result, sort_keys=True, ensure_ascii=False)
        if isinstance(result, dict):
            for key, item in result.items():
                values[f"tool.result.{key}"] = item if isinstance(item, str) else json.dumps(item)
        tool_record = {"tool": spec["name"], "arguments": arguments, "result": result}
    effects: list[dict[str, Any]] = []
    for step in chosen["plan"]:
        effect = {}
        for key, value in step.items():
            if key == "entity_id" and value == SUBJECT_ID:
                effect[key] = subject_id
            elif key == "environment_label" and value == SUBJECT_ENVIRONMENT:
                effect[key] = subject["environment"]
            elif key in ("state", "content"):
                effect[key] = _render(value, values)
            else:
                effect[key] = value
        effects.append(effect)
    intent = _render(chosen["intent"], values)
    memory_line = _render(chosen["memory"], values)
    effects.append({"op": "append_entity_memory", "entity_id": subject_id, "content": memory_line})
    patch = {"narration": _render(chosen["narration"], values), "effects": effects}
    monologue = {
        "subject_id": subject_id,
        "node_id": node["id"],
        # Ids and a content hash, not copies: a copy of every co-located entity per agent
        # made the turn's events grow with the square of a room's population.
        "perceived": [e["id"] for e in perceived_list],
        "perceived_hash": perceived_hash(perceived_list),
        "ambient": dict(ctx.ambient),
        "rules_considered": considered,
        "matched_rule": chosen["id"],
        "intent": intent,
        "plan": effects,
        "memory": memory_line,
        "seed": format(seed_for(ctx, subject_id, node["id"]), "016x"),
    }
    if tool_record is not None:
        monologue["tool_call"] = tool_record
    return RuleOutcome(patch, monologue, monologue_hash(monologue), chosen["id"])


def perceived_hash(entities: list[dict[str, Any]]) -> str:
    """sha256 of what a subject perceived: each co-located entity's id, name and state, in
    scenario order, as compact JSON arrays (the monologue keeps the ids and this hash)."""
    data = json.dumps(
        [[e["id"], e["name"], e["state"]] for e in entities],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def monologue_hash(monologue: Mapping[str, Any]) -> str:
    """sha256 of the monologue as sorted-key compact JSON. Not RFC 8785 (that is for stored
    components); this hash runs once per agent per turn, where the pure-Python JCS is the
    turn's largest cost, and the monologue holds only strings, integers and RNG draws."""
    data = json.dumps(monologue, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()
