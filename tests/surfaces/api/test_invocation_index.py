"""The index of every source call (generations, ambient sources, tools, conformance checks) over
real HTTP: each filter narrows it, tool calls carry their arguments, a bad filter is a 400, and
the page lists the calls with links to their attempts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from cognition_app.models import SourceInvocation
from tests.cognition_app.test_llm_retry import ANT_OK
from tests.cognition_app.test_park import BUY_CANDY, final, remember, set_state
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import create_world, run_turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def calls(scripted_llm: ScriptedLLM, toy_sources: str) -> None:
    create_world("park", "candy")
    scripted_llm.script(
        BUY_CANDY,
        final(
            "Bob buys the last candy bar.",
            set_state("bob", "holding a candy bar"),
            remember("bob", "Turn 1: I bought a candy bar."),
        ),
    )
    assert run_turn("candy").status == "committed"
    create_world("ant_on_plate", "plate")
    scripted_llm.script(ANT_OK)
    assert run_turn("plate").status == "committed"


def _ids(http: httpx.Client, query: str) -> set[str]:
    answer = http.get(f"/api/source-invocations/?limit=200&{query}")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["count"] == len(body["results"])
    return {row["id"] for row in body["results"]}


def _expected(**filters: Any) -> set[str]:
    return {
        str(pk) for pk in SourceInvocation.objects.filter(**filters).values_list("pk", flat=True)
    }


def test_the_invocation_index_filters_by_each_field(
    live_server: Any, reader_user: User, calls: None
) -> None:
    token = Token.objects.create(user=reader_user).key
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=30
    ) as http:
        everything = _ids(http, "")
        assert everything == _expected()
        kinds = set(SourceInvocation.objects.values_list("kind", flat=True))
        assert {
            "llm_generation",
            "ambient_context",
            "model_elected_tool",
            "conformance_check",
        } <= kinds
        for kind in kinds:
            assert _ids(http, f"kind={kind}") == _expected(kind=kind)
        tools = http.get("/api/source-invocations/?kind=model_elected_tool").json()["results"]
        assert [(t["source"], t["arguments"], t["subject_id"]) for t in tools] == [
            ("buy_candy", {"item": "candy_bar"}, "bob")
        ]
        # source: a tool's name, or a source's label
        assert _ids(http, "source=buy_candy") == _expected(tool_name="buy_candy")
        assert _ids(http, "source=chat") == _expected(source_label="chat")
        assert _ids(http, "source=chat")
        assert _ids(http, "subject=ant") == _expected(subject_id="ant")
        assert _ids(http, "status=succeeded") == _expected(status="succeeded")
        assert _ids(http, "status=failed") == set()
        assert _ids(http, "world=plate") == _expected(world__slug="plate")
        assert _ids(http, "world=candy&kind=llm_generation") == _expected(
            world__slug="candy", kind="llm_generation"
        )
        future = (timezone.now() + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
        past = (timezone.now() - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
        assert _ids(http, f"since={future}") == set()
        assert _ids(http, f"since={past}&until={future}") == everything
        generation = http.get("/api/source-invocations/?kind=llm_generation&world=plate").json()
        assert generation["results"][0]["llm_call_id"] is not None
        for bad in ("kind=telepathy", "status=maybe", "since=yesterday", "world=Not A Slug"):
            refused = http.get(f"/api/source-invocations/?{bad}")
            assert refused.status_code == 400, bad
            assert refused.json()["error"]["details"]["field"] == bad.split("=")[0]


def test_the_source_calls_page_lists_tool_calls_with_their_attempts(
    client: Client, reader_user: User, calls: None
) -> None:
    client.force_login(reader_user)
    page = client.get("/invocations/?kind=model_elected_tool").content.decode()
    (tool,) = SourceInvocation.objects.filter(kind="model_elected_tool")
    assert "buy_candy" in page and "candy_bar" in page
    assert f'href="/attempts/{tool.attempt_id}/"' in page
    assert f'href="/invocations/{tool.pk}/"' in page
    bad = client.get("/invocations/?kind=telepathy")
    assert bad.status_code == 400 and "kind" in bad.content.decode()


def test_the_turn_page_lists_each_subjects_tool_calls(
    client: Client, reader_user: User, calls: None
) -> None:
    client.force_login(reader_user)
    page = client.get("/worlds/candy/turns/1/").content.decode()
    section = page[page.index('id="tool-calls"') :]
    assert "buy_candy" in section and "candy_bar" in section and "bob" in section
    (tool,) = SourceInvocation.objects.filter(kind="model_elected_tool")
    assert tool.response_json is not None
    result_key = next(iter(tool.response_json))
    assert result_key in section
    data = client.get("/worlds/candy/turns/1/?format=json").json()
    assert [(c["tool"], c["arguments"]) for c in data["tool_calls"]] == [
        ("buy_candy", {"item": "candy_bar"})
    ]
    # A turn without tool calls shows no such section.
    assert 'id="tool-calls"' not in client.get("/worlds/plate/turns/1/").content.decode()


def test_the_llm_call_list_shows_a_preview_and_the_latency(
    client: Client, reader_user: User, calls: None
) -> None:
    from cognition_app.models import LlmCall

    client.force_login(reader_user)
    data = client.get("/llm-calls/?world=plate&format=json").json()
    (row,) = data["results"]
    call = LlmCall.objects.get(pk=row["id"])
    assert row["preview"] == " ".join(call.raw_text.split())[:120]
    assert row["preview"].startswith('{"kind"')
    assert call.ended_at is not None
    assert row["latency_ms"] == round((call.ended_at - call.started_at).total_seconds() * 1000)
    page = client.get("/llm-calls/?world=plate").content.decode()
    assert "The ant walks east" in page  # the reply's beginning, readable in the list


def test_the_comparison_lists_each_turns_tool_calls_and_whether_they_differ(
    client: Client, reader_user: User, scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    from worlds_app.comparison import world_compare

    create_world("park", "thirsty")
    create_world("park", "hungry")
    scripted_llm.script(
        {
            "kind": "tool_call",
            "tool_call": {"name": "use_drinking_fountain", "arguments": {}},
            "patch": None,
        },
        final("Bob drinks.", set_state("bob", "no longer thirsty"), remember("bob", "I drank.")),
    )
    assert run_turn("thirsty").status == "committed"
    scripted_llm.script(
        BUY_CANDY,
        final("Bob buys candy.", set_state("bob", "holding candy"), remember("bob", "Candy.")),
    )
    assert run_turn("hungry").status == "committed"
    comparison = world_compare(slug="thirsty", other="hungry", params={})
    first = next(t for t in comparison["turns"] if t["number"] == 1)
    assert first["tool_calls"] == {
        "left": ["bob: use_drinking_fountain {}"],
        "right": ['bob: buy_candy {"item":"candy_bar"}'],
        "differ": True,
    }
    assert next(t for t in comparison["turns"] if t["number"] == 0)["tool_calls"]["differ"] is False
    client.force_login(reader_user)
    page = client.get("/worlds/thirsty/compare/hungry/").content.decode()
    assert "use_drinking_fountain" in page and "buy_candy" in page and "Tool calls" in page


def test_provenance_names_the_tool_calls_before_the_deciding_generation(
    client: Client, reader_user: User, calls: None
) -> None:
    client.force_login(reader_user)
    page = client.get("/worlds/candy/entities/bob/").content.decode()
    (tool,) = SourceInvocation.objects.filter(kind="model_elected_tool")
    assert "decided by LLM call" in page
    assert f'href="/invocations/{tool.pk}/"><code>buy_candy</code></a>' in page
    data = client.get("/worlds/candy/entities/bob/?format=json").json()
    decided = [h["decided_by"] for h in data["history"] if "llm_call_id" in h["decided_by"]]
    assert decided and [t["tool_name"] for t in decided[0]["tool_calls"]] == ["buy_candy"]
    # a change decided without tools names none
    plate = client.get("/worlds/plate/entities/ant/?format=json").json()
    assert all(h["decided_by"].get("tool_calls", []) == [] for h in plate["history"])
