"""The JSON log formatter: one line per record, for the web process and the Celery workers."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from chukwa_core.log_context import FIELDS

# What every LogRecord has; anything else on a record came from `extra=` or a filter.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """timestamp, level, logger, message, the turn's ids (world, attempt, subject) when bound,
    the `extra=` fields of scalar type, and the traceback as `exception`."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value:
                line[name] = value
        for key, value in record.__dict__.items():
            # Scalars only: objects such as Django's `request` extra would drag headers in.
            if key not in _STANDARD and key not in line and _is_scalar(value):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


class HealthCheckFilter(logging.Filter):
    """``/healthz`` answering 503 while a service warms up (or is down) is logged at INFO, not
    as Django's "Service Unavailable" ERROR: a stack starting up polls it until it answers 200,
    and a monitor polls it for ever."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        if getattr(record, "status_code", None) != 503 or getattr(request, "path", "") != (
            "/healthz"
        ):
            return True
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)
