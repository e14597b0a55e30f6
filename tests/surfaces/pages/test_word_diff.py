"""Word-level diffs (surfaces/pages/word_diff.py): a one-sentence change in a long paragraph
reads as the words that changed, in the author's review and on a workflow's page against the
version it was derived from."""

from __future__ import annotations

import copy

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scenarios_app.services.workflow_versions import cognition_workflow_derive
from surfaces.pages.authoring.review import diff_rows, flatten
from surfaces.pages.word_diff import mark_words, word_pair
from tests.worlds_app.test_counterfactuals import RULE_SCENARIO

PARAGRAPH = (
    "The ant stands on a white plate under a lamp. It is hungry and it smells bread. "
    "Nothing moves unless something moves it."
)


def _changed(segments: list[dict[str, object]]) -> list[object]:
    return [s["text"] for s in segments if s["changed"]]


def test_one_changed_sentence_marks_only_its_words() -> None:
    after = PARAGRAPH.replace("it smells bread", "it is very thirsty")
    pair = word_pair(PARAGRAPH, after)
    assert pair is not None
    before_runs, after_runs = pair
    assert _changed(before_runs) == ["smells bread."]
    assert _changed(after_runs) == ["is very thirsty."]
    # the unchanged words are all there, unmarked, in order
    assert "".join(s["text"] for s in after_runs) == after  # type: ignore[misc]


def test_a_rewritten_line_is_shown_whole() -> None:
    assert word_pair("alpha beta gamma delta", "one two three four") is None
    rows = mark_words([{"kind": "del", "text": "alpha beta"}, {"kind": "add", "text": "x y"}])
    assert all("segments" not in r for r in rows)


def test_the_review_pairs_replaced_lines_word_by_word() -> None:
    before = flatten({"prompt": PARAGRAPH, "max": 3})
    after = flatten({"prompt": PARAGRAPH.replace("white plate", "blue plate"), "max": 3})
    rows = diff_rows(before, after)
    (removed,) = [r for r in rows if r["kind"] == "del"]
    (added,) = [r for r in rows if r["kind"] == "add"]
    assert _changed(removed["segments"]) == ["white"]
    assert _changed(added["segments"]) == ["blue"]


@pytest.mark.django_db
def test_a_workflow_page_shows_its_changes_from_its_parent(
    client: Client, reader_user: User
) -> None:
    workflow = RULE_SCENARIO["cognition_profiles"]["flipper"]["inline"]["workflow"]["inline"]
    parent = cognition_workflow_derive(content=workflow, parent_hash="")["hash"]
    changed = copy.deepcopy(workflow)
    changed["nodes"][0]["rules"][0]["intent"] = "flip the shiny coin"
    child = cognition_workflow_derive(content=changed, parent_hash=parent, note="shinier")["hash"]
    client.force_login(reader_user)
    page = client.get(f"/store/cognition-workflows/{child}/").content.decode()
    assert 'id="diff-from-parent"' in page
    assert '<mark class="w-add">shiny </mark>' in page or '<mark class="w-add">shiny' in page
    assert "authoring.css" in page
    assert (
        'id="diff-from-parent"'
        not in client.get(f"/store/cognition-workflows/{parent}/").content.decode()
    )


@pytest.mark.django_db
def test_a_scenario_page_shows_what_its_fork_changed_word_by_word(
    client: Client, reader_user: User
) -> None:
    from scenarios_app.services import scenario_assemble, scenario_fork

    parent = scenario_assemble(data=RULE_SCENARIO)["scenario_hash"]
    child = scenario_fork(
        data={
            "primary_parent": {"hash": parent},
            "changes": {"description": "A coin on a wooden table and someone who may flip it."},
        }
    )["scenario_hash"]
    client.force_login(reader_user)
    page = client.get(f"/scenarios/{child}/").content.decode()
    assert "What changed from the primary parent" in page
    assert '<mark class="w-add"> wooden</mark>' in page
    assert (
        "What changed from the primary parent"
        not in client.get(f"/scenarios/{parent}/").content.decode()
    )
