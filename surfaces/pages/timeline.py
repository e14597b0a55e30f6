"""The attempt waterfall as a tree: turn-level calls, then subject → node → generation (a round
with retries groups its tries, each retry carrying the corrective message that asked for it) →
tool call; patch, rule-policy and commit markers where they belong.

Every bar is placed by its real start offset from the attempt start, so subjects that think at
the same time (``concurrent`` workflows, phase 1) are drawn side by side in time. Badges come from
``cognition_app.verdicts``, which reads the verdict written with each finished generation: a
rejected generation reads REJECTED the moment its stream ends, not when the attempt commits.
"""

from __future__ import annotations

import json
from datetime import datetime
from itertools import pairwise
from math import floor, log10
from typing import Any

from django.utils import timezone

from cognition_app.verdicts import TraceDetail, Verdict, invocation_verdict

# Past this many rows, only the groups with something running or wrong start unfolded.
FOLD_ABOVE = 40
TEXT_CLAMP = 1200
MARKER_KINDS = frozenset(
    {
        "world_patch_applied",
        "turn_committed",
        "attempt_failed",
        "attempt_interrupted",
        "attempt_cancelled",
        "inner_monologue",
        "effect_contested",
    }
)
PROBLEMS = frozenset({"rejected", "failed", "transport_failed", "interrupted", "cancelled"})


def _offset_ms(moment: datetime | None, start: datetime) -> float:
    return 0.0 if moment is None else max((moment - start).total_seconds() * 1000, 0.0)


def _clamp(text: Any, limit: int = TEXT_CLAMP) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


def nice_ticks(total_ms: float) -> list[dict[str, float]]:
    """Axis ticks at a round step (1, 2 or 5 times a power of ten, in ms), four to seven of them."""
    raw = max(total_ms, 1.0) / 6
    power = 10 ** floor(log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    ticks = []
    at = 0.0
    while at <= total_ms + 1e-9:
        ticks.append({"left": at / total_ms * 100 if total_ms else 0.0, "ms": at})
        at += step
    return ticks


class _Builder:
    def __init__(self, data: dict[str, Any], details: dict[str, TraceDetail]) -> None:
        self.data = data
        self.details = details
        self.now = timezone.now()
        self.start: datetime = data["started_at"] or data["queued_at"]
        end: datetime = data["ended_at"] or self.now
        for inv in data["source_invocations"]:
            if inv["ended_at"] and inv["ended_at"] > end:
                end = inv["ended_at"]
        for event in data["events"]:
            if event["created_at"] > end:
                end = event["created_at"]
        self.total = max(_offset_ms(end, self.start), 1.0)
        self.rejections = {
            str(e["invocation_id"]): e["payload"].get("rejection", "")
            for e in data["events"]
            if e["kind"] == "generation_rejected"
        }
        self.verdicts: dict[str, Verdict] = {}
        self.tries: dict[str, int] = {}  # a retried call's first try → its tries so far

    # --- rows ---------------------------------------------------------------------------------

    def span(self, offset: float, duration: float) -> dict[str, Any]:
        return {
            "offset_ms": round(offset),
            "duration_ms": round(duration),
            "left": offset / self.total * 100,
            "width": max(duration / self.total * 100, 0.3),
        }

    def invocation_row(self, inv: dict[str, Any]) -> dict[str, Any]:
        key = str(inv["id"])
        detail = self.details.get(key)
        row_fields: dict[str, Any] = {**inv, **(detail if detail is not None else {})}
        verdict = invocation_verdict(row_fields, self.rejections.get(key, ""))
        self.verdicts[key] = verdict
        offset = _offset_ms(inv["started_at"], self.start)
        duration = inv["duration_ms"]
        if duration is None:
            duration = _offset_ms(inv["ended_at"] or self.now, inv["started_at"])
        ttft = inv["ttft_ms"]
        if ttft is None and detail is not None:
            ttft = detail["live_ttft_ms"]
        kind = inv["kind"]
        if kind == "llm_generation":
            label = f"{inv['node_id']} · generation {inv['generation_attempt'] or 1}"
        elif kind == "model_elected_tool":
            label = f"tool {inv['tool_name']}"
        elif kind == "conformance_check":
            label = f"conformance check of {inv['source_label']}"
        else:
            label = f"ambient {inv['ambient_source_id'] or inv['source_label']}"
        if inv.get("retry_of_id") is not None:  # a transport retry: rows come in seq order
            first = str(inv["retry_of_id"])
            self.tries[first] = self.tries.get(first, 1) + 1
            label += f" · try {self.tries[first]}"
        row: dict[str, Any] = {
            "id": f"i-{key}",
            "type": "invocation",
            "kind": kind,
            "label": label,
            "subject_id": inv["subject_id"],
            "node_id": inv["node_id"],
            "status": inv["status"],
            "verdict": verdict,
            "note": verdict["why"],
            **self.span(offset, duration),
            "ttft_ms": ttft,
            "ttft_pct": min(ttft / duration * 100, 100) if ttft is not None and duration else None,
            "tokens": (inv["prompt_tokens"], inv["completion_tokens"]),
            "cost": inv["cost"],
            "cost_estimated": inv["cost_estimated"],
            "invocation_id": inv["id"],
            "llm_call_id": inv["llm_call_id"],
            "workflow_hash": inv["workflow_hash"],
            "generation_attempt": inv["generation_attempt"],
            "tool_loop_round": inv["tool_loop_round"],
            "output_kind": inv["model_output_kind"],
            "failure": inv["failure_message"],
            "replayed_from": inv["replayed_from"],
            "reused_from": inv.get("reused_from"),
            "tokens_reused": inv.get("tokens_reused"),
            "cost_saved": inv.get("cost_saved"),
            "transport_retry_of": inv.get("retry_of_id"),
            "limit_wait_ms": inv.get("limit_wait_ms"),
            "limit_wait": inv.get("limit_wait", ""),
            "children": [],
            "running": inv["status"] == "running",
            # a rejected try that a retry made good is not a problem of its group
            "problem": verdict["code"] in PROBLEMS - {"rejected"},
            "rejected_try": verdict["code"] == "rejected",
        }
        if detail is not None and kind != "llm_generation":
            row["request"] = _clamp(_pretty(detail["request"]))
            row["response"] = _clamp(_pretty(detail["response_json"]))
        elif detail is not None:
            # What was sent (its last messages: the user turn, and the corrective one on a
            # retry) and what came back: the reply pretty-printed when it is JSON, and raw.
            row["input_messages"] = [
                {"role": str(m.get("role", "")), "content": _clamp(m.get("content", ""))}
                for m in (detail["previous_message"], detail["last_message"])
                if isinstance(m, dict)
            ]
            reply = detail["reply"]
            row["reply_raw"] = _clamp(reply)
            try:
                row["reply_pretty"] = _clamp(_pretty(json.loads(reply))) if reply else ""
            except ValueError:
                row["reply_pretty"] = ""
        return row

    def marker_row(self, event: dict[str, Any]) -> dict[str, Any]:
        payload = event["payload"]
        kind = event["kind"]
        offset = _offset_ms(event["created_at"], self.start)
        commit_badge = None
        rule = None
        if kind == "world_patch_applied":
            # provisional until the turn commits; never shown as applied when it did not
            state = event.get("commit_state") or self._commit_state()
            seq = event["patch_seq"]
            label = {
                "committed": f"patch #{seq} applied",
                "provisional": f"patch #{seq} applied (provisional)",
            }.get(state, f"patch #{seq} not committed")
            commit_badge = {"provisional": "provisional", "not_committed": "not committed"}.get(
                state
            )
            note = payload.get("patch", {}).get("narration", "")
        elif kind == "inner_monologue":
            rule = payload.get("matched_rule")
            label = f"{event['node_id']} · rule policy"
            note = f"matched rule {payload.get('matched_rule')}: {payload.get('intent', '')}"
        elif kind == "turn_committed":
            label, note = "turn committed", f"turn {self.data['produced_turn']}"
        elif kind == "effect_contested":
            overridden = payload.get("overridden", {})
            label = f"{payload.get('target_id')} contested"
            note = (
                f"patch #{event['patch_seq']} ({event['subject_id']}) overrides patch "
                f"#{overridden.get('patch_seq')} ({overridden.get('subject_id')})"
            )
        else:
            label = kind.replace("_", " ")
            note = payload.get("reason", "")
        return {
            "id": f"e-{event['seq']}",
            "type": "marker",
            "rule": rule,
            "kind": kind,
            "label": label,
            "commit_badge": commit_badge,
            "subject_id": event["subject_id"],
            "node_id": event["node_id"],
            "note": note,
            "offset_ms": round(offset),
            "left": min(offset / self.total * 100, 99.6),
            "llm_call_id": event["llm_call_id"],
            "invocation_id": event["invocation_id"],
            "payload": _clamp(_pretty(payload), 3000),
            "children": [],
            "running": False,
            "problem": kind in {"attempt_failed", "attempt_interrupted", "effect_contested"},
        }

    def group(
        self, gid: str, kind: str, label: str, children: list[dict[str, Any]]
    ) -> dict[str, Any]:
        starts = [c["offset_ms"] for c in children]
        ends = [c["offset_ms"] + c.get("duration_ms", 0) for c in children]
        offset, end = (min(starts), max(ends)) if children else (0, 0)
        below = list(flatten(children))
        calls = [c for c in below if c["type"] == "invocation"]
        rejected = sum(1 for c in calls if c["verdict"]["code"] == "rejected")
        running = any(c["running"] for c in below)
        problem = any(c["problem"] for c in below)
        return {
            "id": gid,
            "type": "group",
            "kind": kind,
            "label": label,
            "subject_id": children[0]["subject_id"] if children else "",
            **self.span(offset, end - offset),
            "children": children,
            "calls": len(calls),
            # the rules a rule policy matched below (a subject without LLM calls says these)
            "rules": sorted({str(c["rule"]) for c in below if c.get("rule")}),
            "rejected": rejected,
            "tokens": (
                sum((c["tokens"][0] or 0) for c in calls),
                sum((c["tokens"][1] or 0) for c in calls),
            ),
            "running": running,
            "problem": problem,
        }

    def _commit_state(self) -> str:
        status = self.data["status"]
        if status == "committed":
            return "committed"
        return "provisional" if status in ("queued", "running") else "not_committed"

    # --- the tree -----------------------------------------------------------------------------

    def node_children(
        self, subject: str, node: str, rows: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """A node's rows: rounds of generations (retries grouped), tools under the generation
        that asked for them, conformance checks and rule-policy markers in time order."""
        by_round: dict[int, list[dict[str, Any]]] = {}
        others: list[dict[str, Any]] = []
        for row in rows:
            if row["type"] == "invocation" and row["kind"] == "llm_generation":
                by_round.setdefault(row["tool_loop_round"] or 0, []).append(row)
            else:
                others.append(row)
        items = list(others)
        for number, tries in sorted(by_round.items()):
            tries.sort(key=lambda r: r["offset_ms"])
            if len(tries) == 1:
                items.append(tries[0])
                continue
            for previous, retry in pairwise(tries):
                retry["retry_of"] = previous["id"]
                if previous["verdict"]["code"] == "rejected":
                    detail = self.details.get(str(retry["invocation_id"]))
                    message = detail["last_message"] if detail else None
                    if isinstance(message, dict) and message.get("role") == "user":
                        retry["corrective"] = _clamp(message.get("content", ""))
            last = tries[-1]
            label = f"{node} · round {number}" if number else f"{node} · generation"
            grouped = self.group(f"g-{subject}-{node}-{number}", "round", label, tries)
            grouped["verdict"] = last["verdict"]
            grouped["tries"] = len(tries)
            grouped["problem"] = grouped["problem"] or last["verdict"]["code"] == "rejected"
            items.append(grouped)
        items.sort(key=lambda r: r["offset_ms"])
        return items

    def build(self) -> dict[str, Any]:
        rows: dict[str, dict[str, Any]] = {}
        parents: dict[str, str] = {}
        for inv in self.data["source_invocations"]:
            row = self.invocation_row(inv)
            rows[row["id"]] = row
            if inv["parent_id"]:
                parents[row["id"]] = f"i-{inv['parent_id']}"
        for child_id, parent_id in parents.items():
            if parent_id in rows:
                rows[parent_id]["children"].append(rows[child_id])
        roots = [r for r in rows.values() if parents.get(r["id"]) not in rows]
        markers = [self.marker_row(e) for e in self.data["events"] if e["kind"] in MARKER_KINDS]

        top: list[dict[str, Any]] = []
        subjects: dict[str, dict[str, list[dict[str, Any]]]] = {}
        subject_rows: dict[str, list[dict[str, Any]]] = {}
        for row in [*roots, *markers]:
            subject = row["subject_id"]
            if not subject:
                top.append(row)
            elif row["node_id"] and row["kind"] not in {"world_patch_applied", "effect_contested"}:
                subjects.setdefault(subject, {}).setdefault(row["node_id"], []).append(row)
            else:
                subject_rows.setdefault(subject, []).append(row)
                subjects.setdefault(subject, {})
        for subject, nodes in subjects.items():
            children = list(subject_rows.get(subject, []))
            for node, node_rows in nodes.items():
                items = self.node_children(subject, node, node_rows)
                children.append(self.group(f"n-{subject}-{node}", "node", node, items))
            children.sort(key=lambda r: (r["kind"] == "world_patch_applied", r["offset_ms"]))
            top.append(self.group(f"s-{subject}", "subject", subject, children))
        top.sort(key=lambda r: (r["kind"] in {"turn_committed", "attempt_failed"}, r["offset_ms"]))

        flat = list(_walk(top))
        small = len(flat) <= FOLD_ABOVE
        for row in flat:
            row["open"] = bool(row["children"]) and (
                small or row["running"] or row["problem"] or bool(row.get("rejected"))
            )
        ticks = nice_ticks(self.total)
        return {
            "tree": top,
            "rows": flat,
            "total_ms": round(self.total),
            "ticks": ticks,
            # the rows' grid lines fall on the axis ticks: one every tick_pct % of the track
            "tick_pct": ticks[1]["left"] if len(ticks) > 1 else 100.0,
            "folded": not small,
            "verdicts": self.verdicts,
        }


def _walk(rows: list[dict[str, Any]], depth: int = 0) -> Any:
    for row in rows:
        row["depth"] = depth
        yield row
        yield from _walk(row["children"], depth + 1)


def flatten(rows: list[dict[str, Any]]) -> Any:
    """Every row of a tree, in page order (each with the depth ``build`` gave it)."""
    for row in rows:
        yield row
        yield from flatten(row["children"])


def _pretty(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def build_timeline(data: dict[str, Any], details: dict[str, TraceDetail]) -> dict[str, Any]:
    """The waterfall of one attempt (``data`` as ``worlds_app.selectors.attempt_get`` reads it)."""
    return _Builder(data, details).build()


def timeline_json(timeline: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows as ``?format=json`` gives them: flat, each with its parent's id and depth."""
    out: list[dict[str, Any]] = []

    def visit(rows: list[dict[str, Any]], parent: str | None) -> None:
        for row in rows:
            item = {k: v for k, v in row.items() if k not in {"children", "open"}}
            item["parent"] = parent
            if "verdict" in row:
                item["rejection"] = (
                    row["verdict"]["why"] if row["verdict"]["code"] == "rejected" else ""
                )
            out.append(item)
            visit(row["children"], row["id"])

    visit(timeline["tree"], None)
    return out
