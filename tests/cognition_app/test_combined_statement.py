"""One statement for a call's opening (cognition_app/rows.py ``send_combined``, sent by
worlds_app/services/events.py): its checks run whatever the rest returns — a refusing one leaves
nothing written even when the query is planned away — its writes all run (a foreign key to a
row inserted beside it holds), and it returns its query's rows."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cognition_app.models import InvocationKind, LlmCall, SourceInvocation
from cognition_app.rows import combined_statement, insert_statement, send_combined
from worlds_app.models import TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue

pytestmark = pytest.mark.django_db

REFUSE = ("SELECT worlds_app_refuse_unless(%s, 'refused here')", [False])
PASS = ("SELECT worlds_app_refuse_unless(%s, 'refused here')", [True])
NO_ROWS = ("SELECT 1 AS one WHERE %s", [False])


@pytest.fixture
def attempt() -> TurnAttempt:
    from tests.support.worlds import create_world

    world: World = create_world("picnic_rules", "combined")
    attempt_id = turn_attempt_enqueue(slug=world.slug)["attempt_ids"][0]
    return TurnAttempt.objects.get(pk=attempt_id)


def _call(attempt: TurnAttempt) -> tuple[SourceInvocation, LlmCall]:
    inv = SourceInvocation(
        attempt_id=attempt.pk,
        world_id=attempt.world_id,
        attempted_turn=1,
        seq=1,
        source_hash="0" * 64,
        kind=InvocationKind.LLM_GENERATION,
        request={"hostile": 'a "quote" \\ and é %s'},
        request_key="1" * 64,
        started_at=timezone.now(),
    )
    call = LlmCall(
        invocation=inv,
        base_url="http://127.0.0.1:1/v1",
        requested_model="m",
        messages=[{"role": "user", "content": "hi %s {}"}],
        params={},
        started_at=inv.started_at,
    )
    return inv, call


def test_the_writes_run_and_a_row_may_refer_to_one_inserted_beside_it(
    attempt: TurnAttempt,
) -> None:
    inv, call = _call(attempt)
    assert send_combined([PASS], [insert_statement(inv), insert_statement(call)]) == []
    stored = LlmCall.objects.select_related("invocation").get(pk=call.pk)
    assert stored.invocation.request == {"hostile": 'a "quote" \\ and é %s'}
    assert stored.messages == [{"role": "user", "content": "hi %s {}"}]


def test_it_returns_its_querys_rows_and_none_is_no_row(attempt: TurnAttempt) -> None:
    inv, _ = _call(attempt)
    query = ("SELECT %s::int AS n, %s::text AS t", [7, "seven"])
    assert send_combined([PASS], [insert_statement(inv)], query) == [(7, "seven")]
    assert send_combined([PASS], [], NO_ROWS) == []
    both = ("SELECT n FROM (VALUES (1), (2)) v(n) ORDER BY n", [])
    assert send_combined([PASS], [], both) == [(1,), (2,)]


@pytest.mark.parametrize("query", [None, NO_ROWS, ("SELECT 1", [])])
def test_a_refusing_check_leaves_nothing_written_whatever_the_query_returns(
    attempt: TurnAttempt, query: tuple[str, list[object]] | None
) -> None:
    inv, call = _call(attempt)
    writes = [insert_statement(inv), insert_statement(call)]
    # as a prepared statement too (psycopg prepares it at its fifth run): a plan for the
    # parameters' values may drop a query that can return nothing
    for _ in range(6):
        with pytest.raises(DatabaseError, match="refused here"), transaction.atomic():
            send_combined([PASS, REFUSE], writes, query)
    assert not SourceInvocation.objects.filter(pk=inv.pk).exists()
    assert not LlmCall.objects.filter(pk=call.pk).exists()


def test_it_leaves_the_commit_synchronous(attempt: TurnAttempt) -> None:
    """A call's opening is sent this way and its request goes out once it returns, so it must
    not turn ``synchronous_commit`` off as trace writes do for their transaction."""
    inv, call = _call(attempt)
    with connection.cursor() as cursor:
        rows = send_combined(
            [PASS],
            [insert_statement(inv), insert_statement(call)],
            ("SELECT current_setting('synchronous_commit') AS s", []),
        )
        assert rows == [("on",)]
        # here the caller's (the test's) transaction, where a set_config would last till its end
        cursor.execute("SELECT current_setting('synchronous_commit')")
        assert cursor.fetchone() == ("on",)


def test_it_is_one_query(attempt: TurnAttempt) -> None:
    inv, call = _call(attempt)
    with CaptureQueriesContext(connection) as queries:
        send_combined([PASS], [insert_statement(inv), insert_statement(call)], NO_ROWS)
    assert len(queries.captured_queries) == 1


def test_a_select_is_refused_among_the_writes() -> None:
    with pytest.raises(ValueError, match="not an INSERT"):
        combined_statement([PASS], [("SELECT 1", [])])
    with pytest.raises(ValueError, match="needs a check"):
        combined_statement([], [])


def test_the_query_log_names_a_statement_run_prepared() -> None:
    """psycopg keeps no query text for a statement it ran prepared (after ``prepare_threshold``
    runs on the connection); Django's debug cursor read it back from there and logged None."""
    from cognition_app.rows import send_one

    with CaptureQueriesContext(connection) as queries:
        for n in range(8):
            send_one(("SELECT %s::int AS n", [n]))
    assert [q["sql"] for q in queries.captured_queries] == ["SELECT %s::int AS n"] * 8
