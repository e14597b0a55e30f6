"""Rows written as tuples (cognition_app/rows.py): COPY for many rows, statements whose rows are
one JSON parameter (``jsonb_populate_record(set)``) sent in one round trip; the same values and
the same errors as the ORM."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import orjson
import pytest
from django.db import DataError, connection, transaction

from cognition_app.recording import trace_batch
from cognition_app.rows import RowTable, insert_rows, insert_statement, update_statement
from worlds_app.models import AttemptEvent, TurnAttempt, World
from worlds_app.services import turn_attempt_enqueue

pytestmark = pytest.mark.django_db

EVENT_ROWS = RowTable.of(
    AttemptEvent,
    (
        "attempt",
        "seq",
        "kind",
        "subject_id",
        "payload",
        "invocation_id",
        "created_at",
        "node_id",
        "workflow_hash",
        "content_hash",
    ),
)
HOSTILE = 'quotes " and \\ backslashes, tab\t, newline\n, é, 😀, \\N, %s, {}'


@pytest.fixture
def attempt(toy_sources: object) -> TurnAttempt:
    from tests.support.worlds import create_world

    world: World = create_world("ant_on_plate_rules", "rows")
    attempt_id = turn_attempt_enqueue(slug=world.slug)["attempt_ids"][0]
    return TurnAttempt.objects.get(pk=attempt_id)


def _rows(attempt: TurnAttempt, count: int) -> list[tuple[object, ...]]:
    from django.utils import timezone

    now = timezone.now()
    return [
        (
            attempt.pk,
            i + 1,
            "node_output",
            HOSTILE if i % 2 else "",
            {"text": HOSTILE, "n": i, "list": [None, True, 1.5], "nested": {"k": HOSTILE}},
            uuid.uuid4() if i % 3 else None,
            now,
            "node",
            "",
            "",
        )
        for i in range(count)
    ]


def test_copy_writes_the_values_the_orm_reads_back(attempt: TurnAttempt) -> None:
    rows = _rows(attempt, 250)
    assert insert_rows(EVENT_ROWS, rows) == 250
    stored = list(
        AttemptEvent.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("attempt_id", "seq", "kind", "subject_id", "payload", "invocation_id")
    )
    assert stored == [row[:6] for row in rows]


def test_statements_write_the_same_in_one_round_trip(attempt: TurnAttempt) -> None:
    rows = _rows(attempt, 7)
    trace_batch(list(EVENT_ROWS.statements(rows)))
    stored = list(
        AttemptEvent.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("attempt_id", "seq", "kind", "subject_id", "payload", "invocation_id")
    )
    assert stored == [row[:6] for row in rows]


@pytest.mark.parametrize("how", ["copy", "statements"])
def test_a_value_postgresql_refuses_is_a_django_error_and_writes_nothing(
    attempt: TurnAttempt, how: str
) -> None:
    rows = _rows(attempt, 3)
    rows[2] = (*rows[2][:3], "NUL \x00 here", *rows[2][4:])
    with pytest.raises(DataError), transaction.atomic():
        if how == "copy":
            insert_rows(EVENT_ROWS, rows)
        else:
            trace_batch(list(EVENT_ROWS.statements(rows)))
    assert not AttemptEvent.objects.filter(attempt=attempt).exists()


@pytest.mark.parametrize("how", ["copy", "statements"])
def test_a_text_too_long_for_its_column_is_refused_not_cut(attempt: TurnAttempt, how: str) -> None:
    rows = _rows(attempt, 2)
    rows[1] = (*rows[1][:7], "n" * 65, *rows[1][8:])  # node_id is a varchar(64)
    with pytest.raises(DataError, match="too long"), transaction.atomic():
        if how == "copy":
            insert_rows(EVENT_ROWS, rows)
        else:
            trace_batch(list(EVENT_ROWS.statements(rows)))
    assert not AttemptEvent.objects.filter(attempt=attempt).exists()


def test_a_row_of_the_wrong_width_is_refused(attempt: TurnAttempt) -> None:
    with pytest.raises(ValueError, match="columns"):
        list(EVENT_ROWS.statements([(attempt.pk, 1)]))


def test_an_insert_of_more_rows_than_one_statement_had_parameters_is_one_statement(
    attempt: TurnAttempt,
) -> None:
    # 7,000 rows of 10 columns: more than the 65,535 parameters a statement of values carries.
    rows = [(*row[:1], i + 1, *row[2:]) for i, row in enumerate(_rows(attempt, 1) * 7_000)]
    (statement,) = EVENT_ROWS.statements(rows)
    assert len(statement[1]) == 1
    trace_batch([statement])
    assert AttemptEvent.objects.filter(attempt=attempt).count() == 7_000


def test_the_statements_text_does_not_depend_on_the_rows(attempt: TurnAttempt) -> None:
    (one,) = EVENT_ROWS.statements(_rows(attempt, 1))
    (many,) = EVENT_ROWS.statements(_rows(attempt, 40))
    assert one[0] == many[0] and len(one[1]) == len(many[1]) == 1
    assert list(EVENT_ROWS.statements([])) == []


def test_an_invocation_inserted_and_updated_by_statements_reads_back_as_the_orm_wrote_it(
    attempt: TurnAttempt,
) -> None:
    from decimal import Decimal

    from django.utils import timezone

    from cognition_app.models import LlmCall, SourceInvocation

    started = timezone.now()

    def invocation(seq: int) -> SourceInvocation:
        return SourceInvocation(
            attempt_id=attempt.pk,
            world_id=attempt.world_id,
            attempted_turn=1,
            seq=seq,
            node_id=HOSTILE,
            subject_id="bob",
            source_hash="h" * 64,
            kind="llm_generation",
            started_at=started,
            request={"messages": [{"role": "user", "content": HOSTILE}], "n": None, "f": 0.5},
            request_key="k" * 64,
            generation_attempt=1,
        )

    by_orm, by_statement = invocation(1), invocation(2)
    by_orm.save()
    call = LlmCall(
        invocation_id=by_statement.pk,
        base_url="http://x",
        requested_model="m",
        messages=[{"role": "user", "content": HOSTILE}],
        params={"temperature": 0.25},
        response_format={"type": "json_schema"},
        started_at=by_statement.started_at,
    )
    trace_batch([insert_statement(by_statement), insert_statement(call)])
    fields = [f.attname for f in SourceInvocation._meta.concrete_fields if f.attname != "id"]
    stored = SourceInvocation.objects.values(*fields)
    assert {**stored.get(pk=by_statement.pk), "seq": 1} == stored.get(pk=by_orm.pk)
    assert LlmCall.objects.get(pk=call.pk).messages == call.messages

    ended = timezone.now()
    trace_batch(
        [
            update_statement(
                LlmCall,
                call.pk,
                {
                    "status": "succeeded",
                    "ended_at": ended,
                    "raw_text": HOSTILE,
                    "cost": Decimal("0.000123"),
                    "prompt_tokens": 12,
                    "cost_estimated": True,
                    "response_format": None,
                },
            )
        ]
    )
    updated = LlmCall.objects.get(pk=call.pk)
    assert (updated.status, updated.ended_at, updated.raw_text) == ("succeeded", ended, HOSTILE)
    assert (updated.cost, updated.prompt_tokens, updated.cost_estimated) == (
        Decimal("0.000123"),
        12,
        True,
    )
    assert updated.response_format is None


def test_a_json_column_holding_a_string_or_null_keeps_it(attempt: TurnAttempt) -> None:
    rows = _rows(attempt, 2)
    rows[0] = (*rows[0][:4], "just a string", *rows[0][5:])
    trace_batch(list(EVENT_ROWS.statements(rows)))
    payloads = list(
        AttemptEvent.objects.filter(attempt=attempt)
        .order_by("seq")
        .values_list("payload", flat=True)
    )
    assert payloads == ["just a string", rows[1][4]]


def test_a_value_with_no_record_form_is_refused_before_anything_is_sent(
    attempt: TurnAttempt,
) -> None:
    rows = _rows(attempt, 1)
    rows[0] = (*rows[0][:3], b"bytes", *rows[0][4:])
    with pytest.raises(TypeError, match="bytes"):
        list(EVENT_ROWS.statements(rows))


def test_a_batch_returns_each_statements_rows(attempt: TurnAttempt) -> None:
    results = trace_batch(
        [
            ("SELECT 1 WHERE false", []),
            *EVENT_ROWS.statements(_rows(attempt, 2)),
            (
                "SELECT seq FROM worlds_app_attemptevent WHERE attempt_id = %s ORDER BY seq",
                [attempt.pk],
            ),
        ]
    )
    assert results == [[], None, [(1,), (2,)]]


def test_a_batch_is_one_query_not_waiting_for_the_wal_and_prepared_once_used_often(
    attempt: TurnAttempt,
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        results = trace_batch(
            [("SHOW synchronous_commit", []), *EVENT_ROWS.statements(_rows(attempt, 2))]
        )
    assert results == [[("off",)], None]
    assert len(captured.captured_queries) == 1  # one round trip: Django sees one query
    probe = "SELECT count(*) FROM worlds_app_attemptevent WHERE attempt_id = %s"
    for _ in range(6):  # prepare_threshold (settings) is 5
        trace_batch([(probe, [attempt.pk])])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ["SELECT count(*) FROM worlds_app_attemptevent WHERE attempt_id = $1%"],
        )
        assert cursor.fetchone() == (1,)


@pytest.mark.django_db(transaction=True)
def test_a_batch_outside_a_transaction_block_skips_the_wal_wait_without_a_warning() -> None:
    from django.db import connection

    # A temporary table of this session: the rows an enqueued attempt's events would need
    # could be claimed by a worker meanwhile (this test commits), and it would then deadlock
    # with the test's flush.
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE batch_probe (n integer)")
    notices: list[str] = []

    def on_notice(diagnostic: Any) -> None:
        notices.append(diagnostic.message_primary or "")

    connection.connection.add_notice_handler(on_notice)
    try:
        assert connection.get_autocommit()
        results = trace_batch(
            [
                ("SHOW synchronous_commit", []),
                ("INSERT INTO batch_probe VALUES (%s), (%s)", [1, 2]),
            ]
        )
    finally:
        connection.connection.remove_notice_handler(on_notice)
    assert results == [[("off",)], None]
    assert notices == []  # SET LOCAL would warn here, once per batch
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM batch_probe")
        assert cursor.fetchone() == (2,)  # committed
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone() == ("on",)  # for that transaction only
        cursor.execute("DROP TABLE batch_probe")


def test_a_refused_statement_refuses_the_whole_batch(attempt: TurnAttempt) -> None:
    from django.db import IntegrityError

    rows = _rows(attempt, 3)
    with pytest.raises(IntegrityError), transaction.atomic():  # a savepoint in the test's
        trace_batch([*EVENT_ROWS.statements(rows[:2]), *EVENT_ROWS.statements(rows[1:])])
    assert not AttemptEvent.objects.filter(attempt=attempt).exists()
    # the connection is usable at once (in a savepoint: the test runs in a transaction)
    trace_batch(list(EVENT_ROWS.statements(rows)))
    assert AttemptEvent.objects.filter(attempt=attempt).count() == 3


def _samples() -> list[object]:
    """Values of every kind the hot path's rows hold, tried on every column (a kind that is
    not the column's own must still go through the field's preparation: a bool in an integer
    column is 1 there, not true)."""
    from datetime import UTC, datetime

    return [
        None,
        "",
        HOSTILE,
        "5",
        0,
        2**31 - 1,
        True,
        False,
        0.5,
        uuid.uuid4(),
        datetime(2026, 11, 24, 19, 30, 1, 123456, tzinfo=UTC),
        {"k": [HOSTILE, 1, None, 0.5]},
        [1, "two"],
    ]


@pytest.mark.parametrize(
    "model_path",
    [
        "cognition_app.models.SourceInvocation",
        "cognition_app.models.LlmCall",
        "cognition_app.models.LlmChunk",
        "worlds_app.models.AttemptEvent",
        "worlds_app.models.TurnAttempt",
    ],
)
def test_a_column_prepared_directly_is_what_its_field_prepares(model_path: str) -> None:
    """The hot path skips a stock field's preparation for the values it would give back: for
    every column of the models it writes and every kind of value, the result (or the error) is
    the one the field's own preparation gives."""
    from importlib import import_module

    from django.db import connection

    from cognition_app.rows import _column_value, _concrete_fields, _direct_types, _plain

    module, name = model_path.rsplit(".", 1)
    model = getattr(import_module(module), name)
    direct = 0
    for field in _concrete_fields(model):
        types = _direct_types(field)
        for value in _samples():
            try:
                expected: object = _plain(field.get_db_prep_save(value, connection))
            except Exception as exc:  # noqa: BLE001 - the same error is expected
                with pytest.raises(type(exc)):
                    _column_value(field, types, value, connection)
                continue
            got = _column_value(field, types, value, connection)
            # as JSON text: 1 == True in Python, but not in the record PostgreSQL reads
            assert json.dumps(got, default=repr) == json.dumps(expected, default=repr), (
                field,
                value,
            )
            direct += type(value) in types
    assert direct >= 6


@pytest.mark.parametrize(
    "row",
    [
        ('déjà vu\n\t"quoted" \\ \u2028 \x01', 7, -3, True, None),
        ("", 0, 2**63 - 1, False, 1.5),
        ("big", 2**70, 0, True, None),  # beyond 64 bits: orjson refuses, json writes it
        ("lone \ud800", 1, 1, True, None),  # orjson refuses a lone surrogate
        ("nan", 1, 1, True, float("nan")),  # orjson would write null
        ("inf", 1, 1, True, float("-inf")),
    ],
)
def test_rows_of_scalars_dump_to_what_json_dumps_gives(row: tuple[Any, ...]) -> None:
    """The fast dump of non-JSON columns (orjson) reads back as ``json.dumps``'s text does, and
    where orjson would refuse or differ it is ``json.dumps``'s text."""
    from cognition_app.rows import _dumps_scalars

    rows = [row, row]
    text = _dumps_scalars(rows)
    expected = json.dumps(rows)
    if any(isinstance(v, float) and not math.isfinite(v) for v in row):
        assert text == expected  # NaN and the infinities: json's own tokens, refused by PG
    else:
        assert json.loads(text) == json.loads(expected)
    if row[0].startswith(("big", "lone")):
        assert text == expected


_NESTED_VALUES: list[Any] = [
    {"flat": "déjà \u2028 \x00", "n": 2**60, "f": 0.1, "ok": True, "none": None},  # orjson
    ["a", 1, 2.5e-7, None],  # orjson
    {"deep": {"nan": float("nan")}},  # not flat: json (which writes NaN, refused by PG)
    {"nan": float("nan")},  # flat but not finite: json
    [float("inf")],
    {"when": __import__("datetime").datetime(2026, 1, 1)},  # json refuses it; orjson would not
    {"id": uuid.UUID(int=7)},
    {1: "int key"},  # json writes "1"; orjson refuses
    {"big": 2**70},  # orjson refuses
    {"lone": "\ud800"},  # orjson refuses
    [("tuple", 1)],
]


@pytest.mark.parametrize("value", _NESTED_VALUES)
def test_a_records_json_value_dumps_as_json_dumps_does(value: Any) -> None:
    """A record's JSON (``_dumps_record``, orjson where it writes what json means) reads back as
    ``json.dumps``'s text does, is ``json.dumps``'s own text where orjson would write NaN as
    null, and raises where ``json.dumps`` raises."""
    from cognition_app.rows import _dumps_record

    record = {"id": "x", "payload": value, "n": None}
    try:
        expected = json.dumps(record)
    except TypeError as exc:
        with pytest.raises(type(exc)):
            _dumps_record(record, [value])
        return
    text = _dumps_record(record, [value])
    if "NaN" in expected or "Infinity" in expected:
        assert text == expected
    else:
        assert json.loads(text) == json.loads(expected)


@pytest.mark.parametrize("value", _NESTED_VALUES)
def test_rows_with_a_json_column_dump_as_json_dumps_does(value: Any) -> None:
    """Rows of a table with JSON columns (``_dumps_rows``: events) likewise: orjson where every
    JSON value is flat and every other value a flat scalar, else ``json.dumps``'s text."""
    from cognition_app.rows import _dumps_rows

    rows = [("evt", 1, value, None), ("evt", 2, {"ok": 1}, 2.5)]
    try:
        expected = json.dumps(rows)
    except TypeError as exc:
        with pytest.raises(type(exc)):
            _dumps_rows(rows, frozenset({2}))
        return
    text = _dumps_rows(rows, frozenset({2}))
    if "NaN" in expected or "Infinity" in expected:
        assert text == expected
    else:
        assert json.loads(text) == json.loads(expected)
    # a value outside the JSON columns that orjson would write and json refuses: json's refusal
    with pytest.raises(TypeError):
        _dumps_rows([("evt", uuid.UUID(int=1), {"ok": 1}, None)], frozenset({2}))


def test_event_rows_with_flat_payloads_go_by_orjson_and_read_back_the_same(
    attempt: TurnAttempt,
) -> None:
    at = EVENT_ROWS.columns.index("payload")
    flat = [
        (*row[:at], {"text": HOSTILE, "n": row[1], "ok": True, "x": 1.5}, *row[at + 1 :])
        for row in _rows(attempt, 3)
    ]
    (statement,) = EVENT_ROWS.statements(flat)
    text = statement[1][0]
    assert text == orjson.dumps(json.loads(text)).decode()  # orjson's own text
    assert insert_rows(EVENT_ROWS, flat) == 3
    stored = list(
        AttemptEvent.objects.filter(attempt=attempt).order_by("seq").values_list("payload")
    )
    assert [p for (p,) in stored] == [row[at] for row in flat]


def test_a_vouched_json_value_is_written_by_orjson_and_an_unvouched_deep_one_by_json(
    attempt: TurnAttempt,
) -> None:
    """``insert_statement(checked=…)``: the caller vouches for a deep value (canonicalized);
    otherwise a deep value goes to ``json.dumps`` (its escapes show which wrote it)."""
    event = AttemptEvent(attempt=attempt, seq=1, kind="x", payload={"deep": {"text": "déjà"}})
    _, (unvouched,) = insert_statement(event)
    _, (vouched,) = insert_statement(event, checked=("payload",))
    assert "d\\u00e9j\\u00e0" in unvouched  # json's escape
    assert "déjà" in vouched  # orjson writes it as it is
    assert json.loads(unvouched) == json.loads(vouched)
    with connection.cursor() as cursor:  # PostgreSQL reads the same row from either
        cursor.execute("SELECT %s::jsonb = %s::jsonb", [unvouched, vouched])
        assert cursor.fetchone() == (True,)
