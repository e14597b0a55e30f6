"""The names beside a hash: what a person calls a stored scenario, cognition profile, workflow
or metric, so that pages show ``park/walker · 05866fc8…`` rather than a bare hash.

A scenario is called by the names that point at it; a profile or a workflow by the profile label
it is bound to in each named scenario (``<scenario name>/<label>``); a metric by its label.
Names move (a name can be pointed elsewhere), so they are read now, never stored."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

from django.db.models import Q

from scenarios_app.models import Metric, ScenarioCognitionProfile, ScenarioName


class HashName(TypedDict):
    text: str  # "park", "park/walker", "fountain_visits"
    url: str  # the page of the name (a scenario name's) or of the metric


def hash_names(*, hashes: Iterable[str]) -> dict[str, list[HashName]]:
    """hash → its names (sorted, each once), for any mix of scenario, profile, workflow and
    metric hashes: three queries. A hash nothing names is left out."""
    wanted = {h for h in hashes if h}
    if not wanted:
        return {}
    found: dict[str, dict[str, HashName]] = {}

    def add(key: str, text: str, url: str) -> None:
        found.setdefault(key, {})[text] = {"text": text, "url": url}

    for name, scenario_hash in ScenarioName.objects.filter(scenario_id__in=wanted).values_list(
        "name", "scenario_id"
    ):
        add(scenario_hash, name, f"/names/{name}/")
    bound = (
        ScenarioCognitionProfile.objects.filter(
            Q(profile_id__in=wanted) | Q(profile__workflow_id__in=wanted),
            scenario__names__isnull=False,
        )
        .values_list("profile_id", "profile__workflow_id", "label", "scenario__names__name")
        .order_by()
    )
    for profile_hash, workflow_hash, label, name in bound:
        for key in (profile_hash, workflow_hash):
            if key in wanted:
                add(key, f"{name}/{label}", f"/names/{name}/")
    for metric_hash, label in Metric.objects.filter(hash__in=wanted).values_list("hash", "label"):
        add(metric_hash, label, f"/store/metrics/{metric_hash}/")
    return {key: [names[t] for t in sorted(names)] for key, names in found.items()}
