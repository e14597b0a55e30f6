"""The metric form (operators): a form for every registered kind, the expression checked as it is
typed (HTMX, the put's own validation, the message beside the field), a judge's source chosen
by label, trying on a committed turn with nothing written, storing (and returning to ``next``
with the metric ticked), and the metric page's types."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from chukwa_core.metric_kinds import METRIC_KINDS
from scenarios_app.models import Metric
from scenarios_app.services import metric_put, response_source_put
from tests.conftest import LLM_SOURCE
from tests.worlds_app.test_measurements import DRANK, buyers_world, expression
from worlds_app.models import Measurement

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}
URL = "/metrics/new/"


@pytest.fixture
def operator(client: Client, operator_user: User) -> Client:
    client.force_login(operator_user)
    return client


def _fields(**changes: str) -> dict[str, str]:
    return {
        "kind": "expression",
        "label": "bought",
        "aggregate": "any",
        "expression": DRANK,
        "type": "",
        "range_min": "",
        "range_max": "",
        "world": "buyers",
        "turn": "1",
        **changes,
    }


def test_readers_cannot_make_metrics(client: Client, reader_user: User) -> None:
    client.force_login(reader_user)
    assert client.get(URL).status_code == 403
    assert client.post(URL, _fields(action="save")).status_code == 403
    assert Metric.objects.count() == 0


def test_a_form_for_every_registered_kind(operator: Client) -> None:
    source = response_source_put(content={**LLM_SOURCE, "label": "judge-chat"})["hash"]
    for kind in METRIC_KINDS:
        html = operator.get(URL, {"kind": kind}).content.decode()
        assert f'name="kind" value="{kind}"' in html, kind
        # every kind is one click away, a link that works without JavaScript
        for other in METRIC_KINDS:
            assert f'href="/metrics/new/?kind={other}"' in html
    judge = operator.get(URL, {"kind": "llm_judge"}).content.decode()
    # the source is chosen by label; its hash is the option's value, never typed
    assert f'<option value="{source}">judge-chat · {source[:8]}</option>' in judge
    assert 'id="ask-judge"' in judge
    assert 'id="ask-judge"' not in operator.get(URL).content.decode()


def test_the_expression_is_checked_as_it_is_typed(operator: Client) -> None:
    bad = operator.post(URL, _fields(action="check", expression="calls[?"), **HTMX)
    assert bad.status_code == 200
    html = bad.content.decode()
    assert 'id="metric-check"' in html and "invalid_expression" in html
    # the message beside the field, swapped in out of band; other fields' errors are cleared
    beside = html.split('id="mf-expression-error"')[1].split("</div>")[0]
    assert 'hx-swap-oob="true"' in beside and ">Invalid jmespath expression: Incomplete" in beside
    assert (
        'id="mf-label-error" class="inline-error field-error" role="alert" hx-swap-oob="true" hidden'
        in html
    )
    good = operator.post(URL, _fields(action="check"), **HTMX).content.decode()
    assert "Valid" in good and "binary (0 or 1)" in good
    typed = operator.post(
        URL,
        _fields(action="check", expression="length(calls)", type="ordinal", range_min="0"),
        **HTMX,
    ).content.decode()
    assert "invalid_range" in typed and "an ordinal scale has two integer ends" in typed
    counted = operator.post(
        URL,
        _fields(action="check", expression="length(calls)", type="count", aggregate="sum"),
        **HTMX,
    ).content.decode()
    assert "count (0, 1, 2, …)" in counted
    assert Metric.objects.count() == 0


def test_trying_shows_the_value_or_the_error_and_the_view_with_nothing_written(
    operator: Client, toy_sources: str
) -> None:
    buyers_world("buyers", 2)
    tried = operator.post(URL, _fields(action="try"), **HTMX).content.decode()
    assert 'id="try-value">1.0<' in tried and "The turn view it read" in tried
    assert "buy_candy" in tried  # the view's calls
    assert 'id="metric-check" ' in tried and 'hx-swap-oob="true"' in tried
    wrong = operator.post(
        URL, _fields(action="try", expression="entities.ann.state"), **HTMX
    ).content.decode()
    assert 'id="try-error-code">metric_type<' in wrong
    missing = operator.post(URL, _fields(action="try", turn="9"), **HTMX).content.decode()
    assert "turn_not_found" in missing
    # without JavaScript the whole page answers, with the same result
    page = operator.post(URL, _fields(action="try")).content.decode()
    assert 'id="try-value">1.0<' in page
    assert (Metric.objects.count(), Measurement.objects.count()) == (0, 0)


def test_a_judge_is_tried_without_asking_it(operator: Client, toy_sources: str) -> None:
    buyers_world("buyers", 1)
    source = response_source_put(content=LLM_SOURCE)["hash"]
    fields = {
        "kind": "llm_judge",
        "label": "plausible",
        "aggregate": "mean",
        "source": source,
        "system": "You rate turns.",
        "user_template": "Rate 1-5:\n{{turn.patches}}",
        "scale_min": "1",
        "scale_max": "5",
        "max_generation_attempts": "1",
        "subject": "",
        "world": "buyers",
        "turn": "1",
    }
    html = operator.post(URL, {**fields, "action": "try"}, **HTMX).content.decode()
    assert "the judge was not asked" in html and "Ann presses the button: dispensed." in html
    assert "ordinal 1–5" in html
    unsourced = operator.post(URL, {**fields, "source": "", "action": "check"}, **HTMX)
    beside = unsourced.content.decode().split('id="mf-source-error"')[1].split("</div>")[0]
    assert "hidden" not in beside


def test_storing_goes_to_the_metric_page_or_back_to_next(operator: Client) -> None:
    stored = operator.post(URL, _fields(action="save"))
    assert stored.status_code == 302
    metric = Metric.objects.get(label="bought")
    assert stored["Location"] == f"/store/metrics/{metric.hash}/"
    page = operator.get(stored["Location"]).content.decode()
    assert 'id="turn-type">binary (0 or 1)<' in page and 'id="world-type">binary (0 or 1)<' in page
    back = "/experiments/new/?slug=thirst&replicates=4"
    again = operator.post(URL, _fields(action="save", label="bought-2", next=back))
    made = Metric.objects.get(label="bought-2")
    assert again["Location"] == f"{back}&metrics={made.hash}"
    # never to another site
    elsewhere = operator.post(
        URL, _fields(action="save", label="bought-3", next="https://evil.example/")
    )
    assert elsewhere["Location"].startswith("/store/metrics/")
    refused = operator.post(URL, _fields(action="save", label="Bad Label"))
    assert refused.status_code == 400 and "mf-label-error" in refused.content.decode()
    assert not Metric.objects.filter(label="Bad Label").exists()


def test_the_metric_list_offers_the_form_to_operators(operator: Client) -> None:
    metric_put(content=expression("bought", DRANK))
    assert 'id="new-metric"' in operator.get("/store/metrics/").content.decode()


def test_the_launch_form_links_to_making_a_metric_and_back(operator: Client) -> None:
    made = operator.post(
        "/experiments/new/",
        {"slug": "thirst", "replicates": "4", "turns": "2", "action": "new_metric"},
    )
    assert made.status_code == 302
    location: Any = made["Location"]
    assert location.startswith("/metrics/new/?next=")
    form = operator.get(location).content.decode()
    assert 'name="next" value="/experiments/new/?' in form
    assert "slug=thirst" in form and "replicates=4" in form
