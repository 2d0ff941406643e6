"""Log records of the service: one JSON object a line (`MESHPLAN_LOG_FORMAT=json`, the
default) or plain text (`text`, for a terminal), each carrying the id of the request it
was logged in.

The request id lives in a context variable (`request_id_var`) that the request-context
middleware sets for each request (`app.api.problems.RequestContextMiddleware`); context
variables follow the request into `run_in_threadpool` and `asyncio.to_thread`, so records
logged by sync handlers carry it too. JSON lines are written by python-json-logger.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Literal

from pythonjsonlogger.json import JsonFormatter

request_id_var: ContextVar[str | None] = ContextVar("meshplan_request_id", default=None)
"""The id of the request being served in this context (None outside a request)."""

JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s %(process)d"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


class RequestIdFilter(logging.Filter):
    """Stamps `record.request_id` from `request_id_var` (keeps one set by the caller)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = request_id_var.get()
        return True


def make_formatter(log_format: Literal["json", "text"]) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter(
            JSON_FIELDS, rename_fields={"levelname": "level", "name": "logger", "asctime": "time"}
        )
    return logging.Formatter(TEXT_FORMAT)


def configure_logging(log_format: Literal["json", "text"], level: str) -> None:
    """Send the root logger's records (and uvicorn's) to stderr in `log_format`, each with
    its request id. Replaces the handler this function installed before, no other."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_meshplan", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler()
    handler._meshplan = True  # type: ignore[attr-defined]
    handler.setFormatter(make_formatter(log_format))
    handler.addFilter(RequestIdFilter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        # uvicorn's own handlers would print its records unformatted: hand them to ours
        # (a logger uvicorn silenced, e.g. the access log under --no-access-log, stays so)
        uvicorn_logger = logging.getLogger(name)
        if uvicorn_logger.handlers:
            uvicorn_logger.handlers.clear()
            uvicorn_logger.propagate = True
