"""``manage.py run_experiment`` (docs/experiments.md, "From the command line"): a design runs on
a real worker and the printed table holds the numbers of ``experiment_results``; a file that is
not JSON and a design with a problem are refused naming where and write nothing; ``--estimate``
writes nothing; Ctrl-C stops the waiting without cancelling."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from chukwa_core.experiment_table import interval, number, p_value
from scenarios_app.services import metric_put, scenario_assemble
from tests.support.worlds import fixture_body
from worlds_app.experiment_results import experiment_results
from worlds_app.management.commands import run_experiment
from worlds_app.models import Experiment, World
from worlds_app.services.experiments import experiment_cancel, experiment_create

SCENARIO = "picnic_rules"


def _metric(label: str, expression: str, aggregate: str = "mean") -> str:
    content = {
        "version": 1,
        "label": label,
        "kind": "expression",
        "aggregate": aggregate,
        "expression": expression,
    }
    return metric_put(content=content)["hash"]


def _design(**extra: Any) -> dict[str, Any]:
    scenario = scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]
    treated = _metric("treated", "contains(world, '--treated--')")
    eaten = _metric("crumb_eaten", "contains(entities.crumb.state, 'eaten')", "any")
    return {
        "slug": "cli",
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {
                "label": "treated",
                "scenario_ref": {"hash": scenario},
                "interventions": [
                    {
                        "turn": 1,
                        "note": "a sparrow takes the crumb",
                        "patch": {
                            "narration": "A sparrow snatches the crumb.",
                            "effects": [
                                {
                                    "op": "set_entity_state",
                                    "entity_id": "crumb",
                                    "state": "claimed by a sparrow and carried off.",
                                }
                            ],
                        },
                    }
                ],
            },
        ],
        "replicates": 3,
        "turns": 2,
        "metrics": [{"hash": treated}, {"hash": eaten}],
        **extra,
    }


def _write(tmp_path: Path, body: Any) -> str:
    path = tmp_path / "design.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return str(path)


def _nothing_written() -> bool:
    return not Experiment.objects.exists() and not World.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.integration
def test_it_runs_the_experiment_and_prints_the_results_table(
    tmp_path: Path, celery_worker: str
) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("run_experiment", _write(tmp_path, _design()), stdout=out, stderr=err)
    printed = out.getvalue()
    assert "experiment cli created: http://" in printed
    assert printed.rstrip().endswith("/experiments/cli/")
    state = Experiment.objects.get(slug="cli")
    assert World.objects.filter(experiment=state).count() == 6

    results = experiment_results(slug="cli")
    by_label = {r.metric.label: r for r in results.results}
    # constructed: every treated world scores 1 on every turn, every control world 0
    treated = {a.arm: a for a in by_label["treated"].arms}
    assert (treated["control"].mean, treated["treated"].mean) == (0.0, 1.0)
    # an ant claims the crumb at turn 1 and eats it at turn 2, unless the sparrow took it
    eaten = {a.arm: a for a in by_label["crumb_eaten"].arms}
    assert (eaten["control"].mean, eaten["treated"].mean) == (1.0, 0.0)
    for result in results.results:
        for arm in result.arms:
            shown = interval(arm.ci_low, arm.ci_high) if arm.ci_status == "shown" else arm.ci_status
            row = rf"^\s+{arm.arm}\s+{arm.n}\s+{arm.n_missing}\s+"
            row += re.escape(number(arm.mean)) + r"\s+" + re.escape(shown) + "$"
            assert re.search(row, printed, re.M), (row, printed)
        (effect,) = result.effects
        ci = effect.ci_status
        if ci == "shown":
            ci = interval(effect.ci_low, effect.ci_high)
        row = (
            rf"^\s+treated - control\s+{effect.n_pairs}\s+"
            + re.escape(f"{number(effect.control_mean)} / {number(effect.treatment_mean)}")
            + rf"\s+{re.escape(number(effect.difference))}\s+{re.escape(ci)}"
            + rf"\s+{re.escape(effect.p_display)}\s+{re.escape(p_value(effect.p_holm))}$"
        )
        assert re.search(row, printed, re.M), (row, printed)
        assert effect.n_pairs == 3 and effect.p_value == 0.25  # 3 pairs: exact, cannot reach 0.05
        assert f"note (treated): {effect.note}" in printed
    assert "metric treated (aggregate: mean; continuous 0–1)" in printed
    assert "metric crumb_eaten (aggregate: any; binary (0 or 1))" in printed
    assert "  p: paired sign-flip permutation test of the mean difference, exact" in printed
    assert "  p: exact McNemar test" in printed
    assert "\nmethods: Experiment cli compared 2 arms" in printed


@pytest.mark.django_db
def test_a_file_that_is_not_json_is_refused_naming_where(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"slug": "cli",\n "arms": [}')
    with pytest.raises(CommandError, match=r"design\.json: invalid_json: line 2 column 11"):
        call_command("run_experiment", path)
    with pytest.raises(CommandError, match="cannot read"):
        call_command("run_experiment", str(tmp_path / "nothing.json"))
    assert _nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"replicates": 0}, "invalid_replicates: replicates: must be an integer"),
        ({"control": "nobody"}, "invalid_control: control: 'nobody' is not one of the arms"),
        ({"metrics": [{"label": "nothing"}]}, "unresolved_reference: metrics[0]: "),
    ],
)
def test_a_bad_design_is_refused_naming_the_field_and_writes_nothing(
    tmp_path: Path, change: dict[str, Any], expected: str
) -> None:
    design = {**_design(), **change}
    with pytest.raises(CommandError) as refused:
        # from standard input, as `manage.py run_experiment - < design.json` reads it
        call_command("run_experiment", "-", stdin=io.StringIO(json.dumps(design)))
    assert str(refused.value).startswith(expected), str(refused.value)
    assert _nothing_written()


@pytest.mark.django_db
def test_estimate_prints_the_estimate_and_writes_nothing(tmp_path: Path) -> None:
    out = io.StringIO()
    call_command("run_experiment", _write(tmp_path, _design()), "--estimate", stdout=out)
    printed = out.getvalue()
    # rule policies call no LLM and expression metrics no judge
    assert "worlds: 6 by 2 turns" in printed
    assert "calls at most: 0 (0 agents, 0 judges)" in printed
    assert "method: " in printed
    assert _nothing_written()


@pytest.mark.django_db
def test_estimate_of_a_stopping_rule_prices_its_worst_case(tmp_path: Path) -> None:
    design = _design()
    stopping = {"metric": design["metrics"][0], "alpha": 0.05, "every": 2, "max_replicates": 7}
    out = io.StringIO()
    path = _write(tmp_path, {**design, "stopping": stopping})
    call_command("run_experiment", path, "--estimate", stdout=out)
    printed = out.getvalue()
    assert "worlds: 14 by 2 turns" in printed  # 2 arms at max_replicates, not 3 replicates
    assert "priced at max_replicates (7 per arm)" in printed
    assert _nothing_written()


@pytest.mark.django_db
def test_estimate_with_power_flags_prints_statsmodels_replicates(tmp_path: Path) -> None:
    """``--power-effect 0.5 --power-sd 1`` on the design's first metric (continuous): the
    replicates needed are statsmodels' own answer, rounded up; a bad flag names its field."""
    import math

    from statsmodels.stats.power import TTestPower

    design = _write(tmp_path, _design())
    out = io.StringIO()
    flags = ("--estimate", "--power-effect", "0.5", "--power-sd", "1")
    call_command("run_experiment", design, *flags, stdout=out)
    printed = out.getvalue()
    needed = math.ceil(TTestPower().solve_power(effect_size=0.5, alpha=0.05, power=0.8))
    assert f"replicates needed for power 0.8: {needed}\n" in printed, printed
    assert "power: treated (continuous), effect 0.5, sd 1 (given), alpha 0.05" in printed
    # 3 pairs cannot reach p < 0.05 with the exact sign-flip test whatever the data: power 0
    assert "power of the design's 3 replicates: 0.000" in printed
    assert "statsmodels" in printed
    with pytest.raises(CommandError) as refused:
        call_command("run_experiment", design, *flags[:3], "--power-metric", "nope", stdout=out)
    assert str(refused.value).startswith("invalid_power: power.metric:"), str(refused.value)
    with pytest.raises(CommandError, match="go with --estimate"):
        call_command("run_experiment", design, *flags[1:], stdout=out)
    assert _nothing_written()


@pytest.mark.django_db
def test_ctrl_c_stops_waiting_and_does_not_cancel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_experiment, "worker_names", lambda: ["a-worker@host"])

    def interrupt(*, slug: str) -> dict[str, Any]:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_experiment, "experiment_get", interrupt)
    with pytest.raises(CommandError, match="was not cancelled and goes on") as stopped:
        call_command("run_experiment", _write(tmp_path, _design()), stdout=io.StringIO())
    assert stopped.value.returncode == 130
    assert Experiment.objects.get(slug="cli").cancelled_at is None


@pytest.mark.django_db
def test_no_wait_creates_and_returns(tmp_path: Path) -> None:
    out = io.StringIO()
    call_command("run_experiment", _write(tmp_path, _design()), "--no-wait", stdout=out)
    assert out.getvalue().startswith("experiment cli created: ")
    assert World.objects.filter(experiment__slug="cli").count() == 6


@pytest.mark.django_db
def test_a_cancelled_experiment_prints_its_table_and_exits_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_experiment, "worker_names", lambda: ["a-worker@host"])
    monkeypatch.setattr(run_experiment, "SETTLE_SECONDS", 0.0)

    def create_then_cancel(*, data: Any, created_by: str) -> Experiment:
        made = experiment_create(data=data, created_by=created_by)
        experiment_cancel(slug=made.slug)
        return made

    monkeypatch.setattr(run_experiment, "experiment_create", create_then_cancel)
    out = io.StringIO()
    with pytest.raises(CommandError, match="experiment cli cancelled; worlds short of") as ended:
        call_command("run_experiment", _write(tmp_path, _design()), "--poll", "0.05", stdout=out)
    assert ended.value.returncode == 1
    # every world stopped short: missing, and no interval made up from nothing
    assert re.search(r"^\s+control\s+0\s+3\s+-\s+unavailable$", out.getvalue(), re.M), (
        out.getvalue()
    )
    assert out.getvalue().rstrip().endswith("/experiments/cli/")


@pytest.mark.django_db
def test_reuse_on_the_command_line_overrides_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, _design(reuse="exact"))
    call_command("run_experiment", path, "--reuse", "off", "--no-wait", stdout=io.StringIO())
    assert Experiment.objects.get(slug="cli").typed_design.reuse == "off"
    with pytest.raises(CommandError, match="invalid choice: 'sometimes'"):
        call_command("run_experiment", path, "--reuse", "sometimes", stdout=io.StringIO())
    assert Experiment.objects.count() == 1


@pytest.mark.django_db
def test_mode_on_the_command_line_overrides_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, _design(mode="online"))
    call_command("run_experiment", path, "--mode", "batch", "--no-wait", stdout=io.StringIO())
    assert Experiment.objects.get(slug="cli").typed_design.mode == "batch"
    with pytest.raises(CommandError, match="argument --mode: invalid choice: 'later'"):
        call_command("run_experiment", path, "--mode", "later", stdout=io.StringIO())
    assert Experiment.objects.count() == 1
