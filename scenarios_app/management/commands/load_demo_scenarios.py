"""Store the fixture scenarios through the same assembly service the API uses."""

from __future__ import annotations

from typing import Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chukwa_core.errors import ChukwaError
from scenarios_app.fixture_files import fixture_names, load_fixture
from scenarios_app.services import ScenarioAssembleInput, scenario_assemble


class Command(BaseCommand):
    help = "Assemble the fixture scenarios (scenarios_app/scenario_fixtures/*.json) into the store."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", help="fixture names (default: all)")
        parser.add_argument("--operator", default="cli", help="recorded on the derivation")

    def handle(self, *args: Any, **options: Any) -> None:
        names = options["names"] or fixture_names()
        for name in names:
            try:
                data = load_fixture(name)
            except FileNotFoundError as exc:
                raise CommandError(str(exc)) from None
            data = {**data, "operator": options["operator"]}
            try:
                # fixture files are assembly inputs as authored; the service checks them
                result = scenario_assemble(data=cast(ScenarioAssembleInput, data))
            except ChukwaError as exc:
                raise CommandError(f"{name}: {exc.code}: {exc.message}") from None
            new = {k: v for k, v in result["new_components"].items() if v}
            status = "stored (new)" if result["was_new_scenario"] else "already stored"
            self.stdout.write(
                f"{name}: {status} {result['scenario_hash']}\n"
                f"  name: {result['name'] or '-'}\n"
                f"  profiles: {', '.join(f'{k}={v[:12]}' for k, v in result['cognition_profiles'].items())}\n"
                f"  environments: "
                f"{', '.join(f'{k}={v[:12]}' for k, v in result['environments'].items())}\n"
                f"  entities: {len(result['entities'])}\n"
                f"  new rows: {', '.join(f'{k} {v}' for k, v in new.items()) or 'none'}"
            )
