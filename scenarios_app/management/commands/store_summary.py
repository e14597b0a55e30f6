"""Print what the store holds: row counts and named scenarios."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from scenarios_app.models import ScenarioName
from scenarios_app.selectors import store_counts


class Command(BaseCommand):
    help = "Print row counts of the scenario store and the named scenarios."

    def handle(self, *args: Any, **options: Any) -> None:
        for key, value in store_counts().items():
            self.stdout.write(f"  {key:<22} {value}")
        for row in ScenarioName.objects.select_related("scenario").order_by("name"):
            self.stdout.write(
                f"  name {row.name} → {row.scenario_id} ({row.scenario.scenario_slug})"
            )
