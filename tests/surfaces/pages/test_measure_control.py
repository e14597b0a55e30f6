"""The world page's "measure" control (operators): the form lists the stored metrics, and
measuring asks the measurement service (``POST /api/worlds/<slug>/measurements/``'s) for the
chosen ones; nothing chosen is an error on the form; readers cannot."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scenarios_app.services import metric_put
from tests.surfaces.pages.test_world_pages import make_world, run_turn
from tests.worlds_app.test_measurements import expression
from worlds_app.services import measurements

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What was handed to the measure queue (no broker in these tests)."""
    handed: list[dict[str, Any]] = []
    monkeypatch.setattr(measurements, "_dispatch", lambda **kwargs: handed.append(kwargs))
    return handed


def test_operators_measure_every_committed_turn_from_the_world_page(
    client: Client, operator_user: User, sent: list[dict[str, Any]]
) -> None:
    world = make_world("ant_on_plate_rules", "alpha")
    run_turn("alpha")
    patched = metric_put(content=expression("patched", "length(patches)", "sum"))["hash"]
    metric_put(content=expression("calls", "length(calls)", "sum"))
    client.force_login(operator_user)
    page = client.get("/worlds/alpha/").content.decode()
    assert 'id="measure"' in page and 'href="/worlds/alpha/measure/"' in page
    form = client.get("/worlds/alpha/measure/", **HTMX).content.decode()
    assert form.startswith('<form class="measure-form"')  # the partial alone
    assert f'value="{patched}"' in form and "0–1" in form

    nothing = client.post("/worlds/alpha/measure/", {}, **HTMX).content.decode()
    assert 'id="measure-error"' in nothing and sent == []

    queued = client.post("/worlds/alpha/measure/", {"metrics": [patched]}, **HTMX)
    assert 'id="measure-queued"' in queued.content.decode()
    assert sent == [{"world_id": world.pk, "metric_hashes": [patched]}]
    # without JavaScript: back to the world's metrics
    again = client.post("/worlds/alpha/measure/", {"metrics": [patched]})
    assert again.status_code == 302 and again["Location"] == "/worlds/alpha/#metrics"
    assert len(sent) == 2


def test_readers_cannot_measure(
    client: Client, reader_user: User, sent: list[dict[str, Any]]
) -> None:
    make_world("ant_on_plate_rules", "alpha")
    patched = metric_put(content=expression("patched", "length(patches)", "sum"))["hash"]
    client.force_login(reader_user)
    assert 'id="measure"' not in client.get("/worlds/alpha/").content.decode()
    assert client.post("/worlds/alpha/measure/", {"metrics": [patched]}).status_code == 403
    assert sent == []
