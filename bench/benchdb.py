"""Shared plumbing for the benchmarks: a throwaway database on the embedded server and a
private Celery queue. Import after the bench has set CHUKWA_DB_NAME / CHUKWA_CELERY_QUEUE."""

from __future__ import annotations


def recreate_database(name: str, *, create: bool, async_commit: bool = False) -> None:
    import psycopg
    from psycopg import sql

    from chukwa_site.embedded import postgres_ensure

    pg = postgres_ensure()
    with psycopg.connect(
        host=pg.socket_dir, port=pg.port, user=pg.user, dbname="postgres", autocommit=True
    ) as conn:
        # FORCE ends any connection still open on it (a worker child that did not exit).
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        if create and async_commit:
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit TO off").format(
                    sql.Identifier(name)
                )
            )


def queue_purge(queue: str) -> int:
    """Drop the messages enqueue's on-commit kicks sent while no worker listened."""
    from chukwa_site.celery import app

    with app.connection_for_write() as conn:
        return int(conn.default_channel.queue_purge(queue) or 0)


def queue_delete(queue: str) -> None:
    """Remove the bench queue and its bindings from the shared broker."""
    from chukwa_site.celery import app

    with app.connection_for_write() as conn:
        bound = app.amqp.queues[queue].bind(conn.default_channel)
        bound.declare()  # the transport deletes only bindings it knows of
        bound.delete()
