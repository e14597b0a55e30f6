"""The experiment pages without a browser: sign-in, the index (constant queries), an
experiment's page whose results table says what ``experiment_results`` says, its progress poll
(stopping when done), the operators' actions (403 for readers, form errors for bad input) and
the launch form (estimate, launch, errors next to their field with nothing written)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils.html import escape

from scenarios_app.services import metric_put, scenario_assemble
from surfaces.pages.metric_strip import value_text
from tests.support.worlds import fixture_body
from worlds_app import experiment_selectors
from worlds_app.experiment_results import experiment_results
from worlds_app.experiment_selectors import experiment_get
from worlds_app.models import Experiment, TurnAttempt, World
from worlds_app.services import turn_attempt_run
from worlds_app.services.experiment_estimate import experiment_estimate
from worlds_app.services.experiments import experiment_create
from worlds_app.services.measurements import world_measure
from worlds_app.services.references import references_upload

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}
SCENARIO = "picnic_rules"
# 1 on every turn of a treated world, 0 on a control one (a known answer), and a varied one
TREATED = "contains(world, '--treated--')"
VARIED = "length(join(' ', patches[].narration))"


def stored_scenario() -> str:
    return scenario_assemble(data=fixture_body(SCENARIO))["scenario_hash"]


def expression_metric(label: str, expression: str) -> str:
    return metric_put(
        content={
            "version": 1,
            "label": label,
            "kind": "expression",
            "aggregate": "mean",
            "expression": expression,
        }
    )["hash"]


def design(slug: str, scenario: str, metrics: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "slug": slug,
        "name": f"Does a breeze matter? ({slug})",
        "arms": [
            {"label": "control", "scenario_ref": {"hash": scenario}},
            {"label": "treated", "scenario_ref": {"hash": scenario}},
        ],
        "replicates": 3,
        "turns": 2,
        "metrics": [{"hash": m} for m in metrics],
        **extra,
    }


def run_experiment(slug: str, metrics: list[str], *, fail: str | None = None) -> None:
    """Run every queued turn of the experiment in this process, then measure its worlds (what
    the worker does, without one). ``fail``: a world whose turns are cancelled instead."""
    if fail is not None:
        TurnAttempt.objects.filter(world__slug=fail, status="queued").update(status="cancelled")
    for attempt_id in (
        TurnAttempt.objects.filter(world__experiment__slug=slug, status="queued")
        .order_by("world_id", "seq")
        .values_list("id", flat=True)
    ):
        assert turn_attempt_run(attempt_id=str(attempt_id), owner="test") == "committed"
    for world_id in World.objects.filter(experiment__slug=slug).values_list("pk", flat=True):
        world_measure(world_id=world_id, metric_hashes=metrics)


def completed_experiment(slug: str = "breeze", **extra: Any) -> list[str]:
    metrics = [expression_metric("treated", TREATED), expression_metric("varied", VARIED)]
    experiment_create(data=design(slug, stored_scenario(), metrics, **extra), created_by="olga")
    run_experiment(slug, metrics)
    return metrics


@pytest.fixture
def operator(client: Client, operator_user: User) -> Client:
    client.force_login(operator_user)
    return client


@pytest.fixture
def reader(client: Client, reader_user: User) -> Client:
    client.force_login(reader_user)
    return client


def test_the_pages_need_sign_in(client: Client) -> None:
    for path in ("/experiments/", "/experiments/new/", "/experiments/breeze/"):
        answer = client.get(path)
        assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")


def test_an_unknown_experiment_is_a_404_page(reader: Client) -> None:
    answer = reader.get("/experiments/nothing-here/")
    assert answer.status_code == 404
    assert "experiment_not_found" in answer.content.decode() or "not found" in (
        answer.content.decode().lower()
    )
    assert reader.get("/experiments/Bad%20Slug/").status_code in (400, 404)
    assert reader.get("/experiments/nothing-here/?format=json").json()["error"]["code"] == (
        "experiment_not_found"
    )


def test_the_index_lists_every_experiment_in_constant_queries(reader: Client) -> None:
    empty = reader.get("/experiments/").content.decode()
    assert "No experiments yet" in empty
    scenario = stored_scenario()
    metric = expression_metric("treated", TREATED)
    experiment_create(data=design("first", scenario, [metric]))

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert reader.get("/experiments/").status_code == 200
        return len(captured)

    one = queries()
    for n in range(4):
        experiment_create(data=design(f"more-{n}", scenario, [metric]))
    assert queries() == one
    page = reader.get("/experiments/").content.decode()
    assert page.count('href="/experiments/more-') == 4 and 'href="/experiments/first/"' in page
    assert "0/12 turns" in page and "badge s-running" in page
    listed = reader.get("/experiments/?format=json").json()["results"]
    assert [e["slug"] for e in listed][-1] == "first"
    assert listed[0]["progress"]["turns_planned"] == 12
    # the site's navigation links the index
    assert 'href="/experiments/"' in page


def test_a_completed_experiment_shows_what_experiment_results_says(reader: Client) -> None:
    completed_experiment()
    results = experiment_results(slug="breeze")
    page = reader.get("/experiments/breeze/").content.decode()
    assert "badge s-completed" in page and 'hx-trigger="every 2s"' not in page
    for metric in results.results:
        section = page.split(f'data-metric="{metric.metric.hash}"', 1)[1].split("</section>", 1)[0]
        for arm in metric.arms:
            row = section.split(f'<tr data-arm="{arm.arm}">', 1)[1].split("</tr>", 1)[0]
            keys = ["mean", "sd"] + (["ci_low", "ci_high"] if arm.ci_status == "shown" else [])
            for key in keys:
                shown = re.search(rf'data-key="{key}" data-value="([^"]*)">([^<]*)<', row)
                assert shown is not None, (key, row)
                value = getattr(arm, key)
                raw = "" if value is None else repr(value)
                assert (shown.group(1), shown.group(2)) == (raw, value_text(value))
            assert f'data-key="ci" data-status="{arm.ci_status}"' in row
            if arm.ci_status != "shown":  # named, with its reason on hover
                assert f">{arm.ci_status}</span>" in row
            assert f'data-key="n">{arm.n}<' in row
        (effect,) = metric.effects
        effects = section.split('class="table results-effects"', 1)[1]
        row = effects.split('<tr data-arm="treated">', 1)[1].split("</tr>", 1)[0]
        keys = ["difference", "p_value", "p_holm"]
        keys += ["ci_low", "ci_high"] if effect.ci_status == "shown" else []
        for key in keys:
            assert f'data-key="{key}" data-value="{getattr(effect, key)!r}"' in row
        assert f'data-key="ci" data-status="{effect.ci_status}"' in row
        assert f">{effect.p_display}</td>" in row
        assert escape(effect.p_method) in section and escape(effect.ci_method) in section
        if effect.note:
            assert escape(effect.note) in section
        assert 'data-plot="turns"' in section and 'data-plot="worlds"' in section
        # the per-turn table: a row per turn, a cell per arm (mean, its CI when it has one, n)
        per_turn = section.split('class="table per-turn"', 1)[1].split("</table>", 1)[0]
        rows = per_turn.split("<tbody>", 1)[1].split("</tr>")[:-1]
        assert len(rows) == len(metric.turn_rows) == 3  # the baseline and two turns
        for row, turn in zip(rows, metric.turn_rows, strict=True):
            cells = re.findall(r'<td class="num">(.*?)</td>', row)
            assert cells[0] == str(turn.turn)
            for cell, point in zip(cells[1:], turn.points, strict=True):
                assert cell.startswith(value_text(point.mean)) and f"n={point.n}" in cell
                has_interval = f"[{value_text(point.ci_low)}, {value_text(point.ci_high)}]"
                assert (has_interval in cell) == (point.ci_low is not None), cell
        # each world's value, arm by arm
        shown_worlds = section.split('class="table world-values"', 1)[1].split("</table>", 1)[0]
        for arm in metric.arms:
            for w in arm.worlds:
                assert (
                    f'<tr><td>{arm.arm}</td><td class="num">{w.replicate}</td>'
                    f'<td><a href="/worlds/{w.world}/">{w.world}</a></td>'
                    f'<td class="num">{value_text(w.value)}'
                ) in shown_worlds
    treated = results.results[0]
    assert [a.mean for a in treated.arms] == [0.0, 1.0]
    assert [w.value for w in treated.arms[1].worlds] == [1.0, 1.0, 1.0]
    # the plots' data is the results themselves, handed over as JSON (never built as script)
    assert '<script id="experiment-plot-data" type="application/json">' in page
    # every world linked; a treatment world linked to its comparison with its pair
    for arm in ("control", "treated"):
        for i in (1, 2, 3):
            assert f'href="/worlds/breeze--{arm}--{i}/"' in page
    assert 'href="/worlds/breeze--control--2/compare/breeze--treated--2/"' in page
    assert "plot-0.6.17.min.js" in page
    data = reader.get("/experiments/breeze/?format=json").json()
    assert data["status"] == "completed" and len(data["results"]) == 2
    # the methods paragraph, ready to copy, with the software that computed it
    assert 'id="methods-text"' in page and escape(results.methods) in page
    assert 'data-copy="#methods-text"' in page
    assert f"statsmodels {results.software.statsmodels}" in page


def test_failed_worlds_are_one_click_away(reader: Client) -> None:
    metrics = [expression_metric("treated", TREATED)]
    experiment_create(data=design("gusty", stored_scenario(), metrics))
    run_experiment("gusty", metrics, fail="gusty--treated--2")
    page = reader.get("/experiments/gusty/").content.decode()
    assert 'href="#failed"' in page and 'id="failed"' in page
    failed = page.split('id="failed"', 1)[1].split("</section>", 1)[0]
    assert 'href="/worlds/gusty--treated--2/"' in failed
    assert "/attempts/?world=gusty--treated--2&amp;status=failed" in failed
    assert "badge s-failed" in page


def test_progress_is_polled_while_running_and_the_poll_stops_when_done(operator: Client) -> None:
    metric = expression_metric("treated", TREATED)
    experiment_create(data=design("windy", stored_scenario(), [metric]))
    page = operator.get("/experiments/windy/").content.decode()
    assert 'hx-get="/experiments/windy/" hx-trigger="every 2s"' in page
    poll = operator.get("/experiments/windy/", **HTMX)
    assert poll.status_code == 200 and poll.content.decode().lstrip().startswith(
        '<section id="progress"'
    )
    assert 'id="progress-turns">0<' in poll.content.decode()
    assert "HX-Request" in poll["Vary"]
    assert operator.post("/experiments/windy/cancel/").status_code == 302
    done = operator.get("/experiments/windy/", **HTMX)
    assert done.status_code == 286 and done["HX-Refresh"] == "true"
    assert "badge s-cancelled" in done.content.decode()


def test_readers_cannot_operate(reader: Client) -> None:
    metric = expression_metric("treated", TREATED)
    experiment_create(data=design("calm", stored_scenario(), [metric]))
    page = reader.get("/experiments/calm/").content.decode()
    assert 'id="operate"' not in page
    assert reader.post("/experiments/calm/cancel/").status_code == 403
    assert reader.post("/experiments/calm/replicates/", {"count": "2"}).status_code == 403
    assert reader.post("/experiments/calm/metrics/", {"metrics": [metric]}).status_code == 403
    assert reader.get("/experiments/new/").status_code == 403
    assert reader.post("/experiments/new/", {"action": "launch"}).status_code == 403
    assert experiment_get(slug="calm")["status"] == "running"
    assert Experiment.objects.get().design["replicates"] == 3


def test_operators_add_replicates_and_metrics_and_bad_input_is_a_form_error(
    operator: Client,
) -> None:
    metric = expression_metric("treated", TREATED)
    other = expression_metric("varied", VARIED)
    experiment_create(data=design("still", stored_scenario(), [metric]))
    page = operator.get("/experiments/still/").content.decode()
    assert 'id="operate"' in page and f'<option value="{other}">' in page
    bad = operator.post("/experiments/still/replicates/", {"count": "many"})
    assert bad.status_code == 400 and 'id="add-count-error"' in bad.content.decode()
    too_many = operator.post("/experiments/still/replicates/", {"count": "6000"})
    assert too_many.status_code == 400 and "too_many_worlds" in too_many.content.decode()
    assert World.objects.count() == 6
    none = operator.post("/experiments/still/metrics/", {})
    assert none.status_code == 400 and "choose at least one metric" in none.content.decode()
    assert operator.post("/experiments/still/replicates/", {"count": "1"}).status_code == 302
    assert World.objects.count() == 8
    assert operator.post("/experiments/still/metrics/", {"metrics": [other]}).status_code == 302
    assert Experiment.objects.get().design["metrics"] == [metric, other]
    assert operator.post("/experiments/nope/cancel/").status_code == 404


def _form(scenario: str, metric: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "slug": "gale",
        "name": "A gale",
        "arm_label": ["control", "treated"],
        "arm_scenario": [scenario, scenario],
        "control": "0",
        "replicates": "2",
        "turns": "2",
        "metrics": [metric],
        "seed": "",
        "max_cost_total": "",
        "max_tokens_total": "",
        "action": "launch",
    }
    body.update(changes)
    return body


def test_the_form_estimates_then_launches(operator: Client) -> None:
    scenario, metric = stored_scenario(), expression_metric("treated", TREATED)
    page = operator.get("/experiments/new/").content.decode()
    assert f'<option value="{scenario}">' in page and f'value="{metric}"' in page
    assert page.count('name="arm_label"') == 2
    more = operator.post("/experiments/new/", _form(scenario, metric, action="add_arm"))
    assert more.content.decode().count('name="arm_label"') == 3
    budgeted = {"max_cost_total": "2.5", "max_tokens_total": "1000"}
    form = _form(scenario, metric, action="estimate", **budgeted)
    estimate = operator.post("/experiments/new/", form, **HTMX)
    text = estimate.content.decode()
    assert estimate.status_code == 200 and text.lstrip().startswith('<section id="estimate"')
    expected = experiment_estimate(
        data={
            **design("gale", scenario, [metric], replicates=2, turns=2),
            "budget": {"max_cost_total": "2.5", "max_tokens_total": 1000},
        }
    )
    assert f'id="estimate-calls">{expected["calls"]["total"]}<' in text
    assert f'id="estimate-tokens">{expected["tokens"]["total"]}<' in text
    assert expected["within_budget"] is True and 'id="estimate-budget">fits<' in text
    assert escape(expected["method"]) in text
    assert not Experiment.objects.exists() and not World.objects.exists()
    launched = operator.post("/experiments/new/", _form(scenario, metric, **budgeted))
    assert launched.status_code == 302 and launched["Location"] == "/experiments/gale/"
    made = Experiment.objects.get()
    assert made.created_by == "ops"
    assert made.design["replicates"] == 2 and World.objects.count() == 4
    assert made.design["budget"]["max_tokens_total"] == 1000
    shown = operator.get("/experiments/gale/").content.decode()
    assert "of budget" in shown and "1000 tokens in all" in shown


def test_the_form_takes_the_simulations_start(operator: Client) -> None:
    """With a seed and a start, the estimate can look for what earlier runs recorded (it says
    why not without them), and the worlds start at that instant."""
    from worlds_app.models import Turn

    scenario, metric = stored_scenario(), expression_metric("treated", TREATED)
    timed = {"seed": "11", "start_time": "2026-06-01T08:00:00Z"}
    estimate = operator.post(
        "/experiments/new/", _form(scenario, metric, action="estimate", **timed), **HTMX
    )
    assert "no start_time given" not in estimate.content.decode()
    untimed = operator.post(
        "/experiments/new/", _form(scenario, metric, action="estimate", seed="11"), **HTMX
    )
    assert "no start_time given" in untimed.content.decode()
    launched = operator.post("/experiments/new/", _form(scenario, metric, **timed))
    assert launched.status_code == 302
    made = Experiment.objects.get()
    assert made.design["start_time"] == "2026-06-01T08:00:00Z"
    starts = Turn.objects.filter(world__experiment=made, number=0)
    assert {t.simulation_time.isoformat() for t in starts} == {"2026-06-01T08:00:00+00:00"}


def test_the_form_knows_a_stopping_rule_and_prices_its_worst_case(operator: Client) -> None:
    scenario, metric = stored_scenario(), expression_metric("treated", TREATED)
    rule = {"stop_max_replicates": "7", "stop_every": "2", "stop_alpha": "0.05"}
    page = operator.get("/experiments/new/").content.decode()
    assert 'name="stop_max_replicates"' in page and 'name="stop_alpha"' in page
    estimate = operator.post(
        "/experiments/new/", _form(scenario, metric, action="estimate", **rule), **HTMX
    )
    assert estimate.status_code == 200
    assert "<strong>14</strong> worlds" in estimate.content.decode()  # 2 arms at 7, not 2
    launched = operator.post("/experiments/new/", _form(scenario, metric, **rule))
    assert launched.status_code == 302
    stopping = Experiment.objects.get().design["stopping"]
    assert stopping == {
        "metric": metric,
        "alpha": 0.05,
        "max_replicates": 7,
        "every": 2,
        "start": 2,
        "treatment": "treated",
    }


def test_the_form_estimates_the_replicates_a_power_needs(operator: Client) -> None:
    """An effect and an sd on the form: the estimate shows the replicates needed and the power
    of the design, as ``experiment_estimate`` answers them; a bad effect is shown at its field."""
    scenario, metric = stored_scenario(), expression_metric("varied", VARIED)
    power = {"power_metric": metric, "power_effect": "0.5", "power_sd": "1"}
    form = _form(scenario, metric, action="estimate", replicates="10", **power)
    text = operator.post("/experiments/new/", form, **HTMX).content.decode()
    expected = experiment_estimate(
        data={
            **design("gale", scenario, [metric], replicates=10, turns=2),
            "power": {"metric": {"hash": metric}, "effect": 0.5, "sd": 1.0},
        }
    )["power"]
    assert expected is not None and expected.replicates_needed is not None
    assert f'id="estimate-replicates-needed">{expected.replicates_needed}<' in text
    assert expected.power_of_design is not None
    assert f'id="estimate-power-of-design">{expected.power_of_design:.3f}<' in text
    assert escape(expected.method) in text
    bad = _form(scenario, metric, action="estimate", power_effect="big", power_sd="1")
    page = operator.post("/experiments/new/", bad)
    assert page.status_code == 400
    assert 'id="power_effect-error"' in page.content.decode()
    assert not Experiment.objects.exists()


@pytest.mark.parametrize(
    ("changes", "key", "code"),
    [
        ({"replicates": "0"}, "replicates", "invalid_replicates"),
        ({"turns": "lots"}, "turns", "invalid_input"),
        ({"slug": "Bad Slug"}, "slug", "invalid_slug"),
        ({"arm_label": ["control", "control"]}, "arm-1-label", "duplicate_arm"),
        ({"arm_scenario": ["", ""]}, "arm-0-scenario", "invalid_scenario_ref"),
        ({"metrics": []}, "metrics", "invalid_metrics"),
        ({"seed": "-3"}, "seed", "invalid_input"),
        ({"max_cost_total": "lots"}, "max_cost_total", "invalid_budget"),
        ({"start_time": "next tuesday"}, "start_time", "invalid_start_time"),
        (
            {"arm_label": ["control", "treated"], "control": "1", "replicates": "6000"},
            "replicates",
            "too_many_worlds",
        ),
        ({"stop_max_replicates": "6", "stop_every": "2"}, "stop_alpha", "invalid_stopping"),
        (
            {"stop_max_replicates": "6", "stop_every": "0", "stop_alpha": "0.05"},
            "stop_every",
            "invalid_stopping",
        ),
        (
            {"stop_max_replicates": "1", "stop_every": "1", "stop_alpha": "0.05"},
            "stop_max_replicates",
            "invalid_stopping",
        ),
    ],
)
def test_a_bad_form_shows_the_error_next_to_its_field_and_writes_nothing(
    operator: Client, changes: dict[str, Any], key: str, code: str
) -> None:
    scenario, metric = stored_scenario(), expression_metric("treated", TREATED)
    answer = operator.post("/experiments/new/", _form(scenario, metric, **changes))
    text = answer.content.decode()
    assert answer.status_code == 400, text[:2000]
    assert f'id="{key}-error"' in text
    assert f"<code>{code}</code>" in text
    assert not Experiment.objects.exists() and not World.objects.exists()
    # what was typed is kept
    assert 'value="A gale"' in text


def test_the_time_left_is_shown_when_the_progress_knows_it(
    operator: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    metric = expression_metric("treated", TREATED)
    experiment_create(data=design("swift", stored_scenario(), [metric]))
    assert 'id="progress-eta"' not in operator.get("/experiments/swift/").content.decode()
    real = experiment_selectors.experiment_get

    def with_eta(*, slug: str) -> dict[str, Any]:
        data = real(slug=slug)
        data["progress"]["eta_seconds"] = 750.0
        return data

    monkeypatch.setattr(experiment_selectors, "experiment_get", with_eta)
    poll = operator.get("/experiments/swift/", **HTMX).content.decode()
    assert 'id="progress-eta">about 12 min<' in poll


def test_a_world_of_an_experiment_links_back_to_it(reader: Client) -> None:
    metric = expression_metric("treated", TREATED)
    experiment_create(data=design("home", stored_scenario(), [metric]))
    page = reader.get("/worlds/home--treated--2/").content.decode()
    assert 'href="/experiments/home/"' in page and "treated #2" in page


def test_the_people_row_and_the_distances_say_what_the_results_say(reader: Client) -> None:
    completed_experiment()
    rows = [{"unit": f"p{i}", "metric": "varied", "value": v} for i, v in enumerate([3, 9, 14])]
    references_upload(slug="breeze", rows=rows)
    results = experiment_results(slug="breeze")
    page = reader.get("/experiments/breeze/").content.decode()
    treated, varied = results.results
    assert treated.people is None and varied.people is not None
    section = page.split(f'data-metric="{varied.metric.hash}"', 1)[1].split("</section>", 1)[0]
    people = section.split('<tr class="people-row"', 1)[1].split("</tr>", 1)[0]
    assert f'data-key="n">{varied.people.n}<' in people
    assert f'data-value="{varied.people.mean!r}">{value_text(varied.people.mean)}<' in people
    table = section.split('class="table results-people"', 1)[1].split("</table>", 1)[0]
    for distance in varied.people.distances:
        row = table.split(f'<tr data-arm="{distance.arm}">', 1)[1].split("</tr>", 1)[0]
        for key in ("difference", "wasserstein"):
            assert f'data-key="{key}" data-value="{getattr(distance, key)!r}"' in row
        assert f'data-key="ks" data-value="{distance.ks_statistic!r}"' in row
    other = page.split(f'data-metric="{treated.metric.hash}"', 1)[1].split("</section>", 1)[0]
    assert "people-row" not in other
