"""Editing a stored metric in the metric form (operators): the form opens with the metric's
fields, says that saving stores a new version, and saving a change stores it under its own hash
(the same label) while the stored one stays as it was; saving it unchanged stores nothing new."""

from __future__ import annotations

import html as html_lib

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scenarios_app.models import Metric
from scenarios_app.services import metric_put, response_source_put
from tests.conftest import LLM_SOURCE
from tests.worlds_app.test_measurements import DRANK

pytestmark = pytest.mark.django_db
URL = "/metrics/new/"


@pytest.fixture
def operator(client: Client, operator_user: User) -> Client:
    client.force_login(operator_user)
    return client


def _stored_expression() -> str:
    content = {
        "version": 1,
        "label": "bought",
        "kind": "expression",
        "aggregate": "mean",
        "expression": DRANK,
        "type": "continuous",
        "range": {"min": 0, "max": 1},
    }
    return str(metric_put(content=content)["hash"])


def _form_fields(page: str) -> dict[str, str]:
    """The named inputs, textareas and selected options of the form as the browser sends them."""
    import re

    fields: dict[str, str] = {}
    for name, value in re.findall(r'<input[^>]* name="([a-z_]+)" value="([^"]*)"', page):
        fields[name] = html_lib.unescape(value)
    for name, value in re.findall(
        r'<textarea[^>]* name="([a-z_]+)"[^>]*>(.*?)</textarea>', page, re.S
    ):
        fields[name] = html_lib.unescape(value)
    for name, body in re.findall(r'<select[^>]* name="([a-z_]+)"[^>]*>(.*?)</select>', page, re.S):
        chosen = re.search(r'<option value="([^"]*)"[^>]* selected', body)
        if chosen:
            fields[name] = html_lib.unescape(chosen.group(1))
    fields.pop("csrfmiddlewaretoken", None)
    return fields


def test_a_stored_expression_opens_in_the_form_and_a_change_is_a_new_version(
    operator: Client,
) -> None:
    old = _stored_expression()
    before = Metric.objects.get(pk=old).content
    page = operator.get(URL, {"edit": old}).content.decode()
    assert 'id="editing"' in page and "new version" in page
    fields = _form_fields(page)
    assert fields["edit"] == old
    assert (fields["kind"], fields["label"], fields["aggregate"]) == (
        "expression",
        "bought",
        "mean",
    )
    assert fields["expression"] == DRANK
    assert (fields["type"], fields["range_min"], fields["range_max"]) == ("continuous", "0", "1")

    # saved unchanged: the same content, the same hash, nothing new stored
    same = operator.post(URL, {**fields, "action": "save"})
    assert same.status_code == 302 and same["Location"] == f"/store/metrics/{old}/"
    assert Metric.objects.filter(label="bought").count() == 1

    changed = {**fields, "expression": "length(patches)", "action": "save"}
    saved = operator.post(URL, changed)
    assert saved.status_code == 302
    new = Metric.objects.exclude(pk=old).get(label="bought")
    assert saved["Location"] == f"/store/metrics/{new.hash}/"
    assert new.content == {**before, "expression": "length(patches)"}
    # the stored version is untouched
    assert Metric.objects.get(pk=old).content == before


def test_a_judge_opens_with_its_source_chosen(operator: Client) -> None:
    source = response_source_put(content={**LLM_SOURCE, "label": "judge-chat"})["hash"]
    judge = metric_put(
        content={
            "version": 1,
            "label": "plausible",
            "kind": "llm_judge",
            "aggregate": "mean",
            "source": {"hash": source},
            "system": "You rate turns.",
            "user_template": "Rate 1-5:\n{{turn.patches}}",
            "scale": {"min": 1, "max": 5},
        }
    )["hash"]
    fields = _form_fields(operator.get(URL, {"edit": judge}).content.decode())
    assert fields["source"] == source
    assert fields["system"] == "You rate turns."
    assert fields["user_template"] == "Rate 1-5:\n{{turn.patches}}"
    assert (fields["scale_min"], fields["scale_max"]) == ("1", "5")
    saved = operator.post(URL, {**fields, "system": "You rate turns, strictly.", "action": "save"})
    new = Metric.objects.exclude(pk=judge).get(label="plausible")
    assert saved["Location"] == f"/store/metrics/{new.hash}/"
    assert new.content["system"] == "You rate turns, strictly."
    assert new.content["source"] == {"hash": source}
    assert (
        new.content["max_generation_attempts"]
        == Metric.objects.get(pk=judge).content["max_generation_attempts"]
    )


def test_the_metric_page_offers_editing_to_operators_only(
    operator: Client, reader_user: User
) -> None:
    old = _stored_expression()
    assert (
        f'href="/metrics/new/?edit={old}"'
        in operator.get(f"/store/metrics/{old}/").content.decode()
    )
    assert operator.get(URL, {"edit": "0" * 64}).status_code == 404
    reader = Client()
    reader.force_login(reader_user)
    assert "edit-metric" not in reader.get(f"/store/metrics/{old}/").content.decode()
    assert reader.get(URL, {"edit": old}).status_code == 403
