"""Django's PostgreSQL backend (``ENGINE = "chukwa_site.postgresql"``), its persistent
connections' health check made cheap.

With ``CONN_HEALTH_CHECKS``, Django runs ``SELECT 1`` before a kept connection's first query of
every request or task: a round trip each time, one per LLM call in a worker (each subject's
thread starts a task per turn). A server that went away (a restart, a stop, an administrator's
``pg_terminate_backend``) closes its end of the connection, and the socket then becomes
readable (its end, or the server's last message). So the check first looks, without waiting,
whether the server has sent anything since: nothing, and the connection is as good as the
``SELECT 1`` would have found it (which can itself be outdated a moment later); something (an
end, a notice, a changed parameter), and the real ``SELECT 1`` runs, as Django's does. Errors
during a request are still followed by Django's full check (``close_if_unusable_or_obsolete``).
"""

from __future__ import annotations

import select

import psycopg
from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def close_if_health_check_failed(self) -> None:
        if (
            self.connection is not None
            and self.settings_dict["CONN_HEALTH_CHECKS"]
            and not getattr(self, "health_check_done", False)  # not in django-stubs
            and not self.pool
            and _server_said_nothing(self.connection)
        ):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()


def _server_said_nothing(raw: psycopg.Connection[object]) -> bool:
    """Whether the connection is open and idle and its socket has nothing to read (looked at
    without waiting); anything else (closed, in a transaction, a file descriptor that cannot be
    polled) says "check properly"."""
    if raw.closed or raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return False
    try:
        readable, _, _ = select.select([raw.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable
