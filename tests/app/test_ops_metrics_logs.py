"""Prometheus `/metrics` and JSON logs with request ids (issue 13, point 7)."""

from __future__ import annotations

import io
import json
import logging

from prometheus_client.parser import text_string_to_metric_families

from app.core.logs import RequestIdFilter, make_formatter, request_id_var


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_latency_problems_queue_and_searches(client, tiny) -> None:
    search = client.post("/v1/searches?wait=20", json=tiny).json()
    assert search["status"] == "succeeded"
    for _ in range(3):
        assert client.get(f"/v1/searches/{search['id']}").status_code == 200
    assert client.get("/v1/searches/nope").status_code == 404
    assert client.post("/v1/estimate", json={"model": 3}).status_code == 422
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    samples = _samples(r.text)
    read = (("method", "GET"), ("route", "/v1/searches/{search_id}"), ("status", "200"))
    assert samples[("meshplan_http_request_duration_seconds_count", read)] == 3
    missing = (("method", "GET"), ("route", "/v1/searches/{search_id}"), ("status", "404"))
    assert samples[("meshplan_http_request_duration_seconds_count", missing)] == 1
    assert (
        samples[("meshplan_http_problems_total", (("status", "404"), ("type", "not-found")))] == 1
    )
    assert (
        samples[("meshplan_http_problems_total", (("status", "422"), ("type", "invalid-input")))]
        == 1
    )
    # a finished search is observed once, by its final status
    assert samples[("meshplan_search_duration_seconds_count", (("status", "succeeded"),))] == 1
    assert samples[("meshplan_searches", (("status", "queued"),))] == 0
    assert samples[("meshplan_searches", (("status", "running"),))] == 0
    assert samples[("meshplan_search_workers", (("state", "configured"),))] == 2
    assert samples[("meshplan_search_pool_warm", ())] == 1
    # unknown paths share one series, not one per path
    client.get("/v1/nothing-here/123")
    client.get("/v1/nothing-here/456")
    samples = _samples(client.get("/metrics").text)
    unmatched = (("method", "GET"), ("route", "unmatched"), ("status", "404"))
    assert samples[("meshplan_http_request_duration_seconds_count", unmatched)] == 2


def test_queue_depth_counts_stored_queued_searches(client, tiny, monkeypatch) -> None:
    from app.api import metrics

    monkeypatch.setattr(metrics, "QUEUE_CACHE_S", 0.0)
    runner = client.app.state.runner
    monkeypatch.setattr(runner, "submit", lambda _id: None)  # stored, never started
    for n in range(3):
        body = dict(tiny, top_k=n + 1)
        assert client.post("/v1/searches", json=body).status_code == 202
    samples = _samples(client.get("/metrics").text)
    assert samples[("meshplan_searches", (("status", "queued"),))] == 3


def test_json_log_lines_carry_the_request_id(client, tiny, caplog) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(make_formatter("json"))
    handler.addFilter(RequestIdFilter())
    errors = logging.getLogger("app.errors")
    errors.addHandler(handler)
    try:
        # a 5xx domain error is logged by the problem handler, inside the request
        from app.services import planning

        def boom(*_a, **_k):
            from specs.errors import PlannerError

            class Unavailable(PlannerError):
                status = 503
                problem_type = "test-unavailable"
                title = "Unavailable"

            raise Unavailable("the test made it fail")

        original = planning.estimate
        planning.estimate = boom
        try:
            r = client.post(
                "/v1/estimate",
                json={
                    "model": {"preset": "llama3-70b"},
                    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8}]},
                    "workload": {
                        "kind": "training",
                        "global_batch_size": 1024,
                        "sequence_length": 4096,
                    },
                    "plan": {"parallelism": {"data": 2, "tensor": 8, "pipeline": 4}},
                },
                headers={"X-Request-ID": "req-abc-123"},
            )
        finally:
            planning.estimate = original
    finally:
        errors.removeHandler(handler)
    assert r.headers["x-request-id"] == "req-abc-123"
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    assert lines, (r.status_code, r.text)
    record = lines[-1]
    assert record["request_id"] == "req-abc-123"
    assert record["level"] == "ERROR" and record["logger"] == "app.errors"
    assert "time" in record and "message" in record
    assert request_id_var.get() is None  # reset after the request


def test_text_format_and_filter_outside_requests() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    assert RequestIdFilter().filter(record)
    assert record.request_id is None
    token = request_id_var.set("r-1")
    try:
        record2 = logging.LogRecord("x", logging.INFO, __file__, 1, "hi", (), None)
        RequestIdFilter().filter(record2)
    finally:
        request_id_var.reset(token)
    line = make_formatter("text").format(record2)
    assert "[r-1]" in line and line.endswith("hi")
    assert json.loads(make_formatter("json").format(record2))["request_id"] == "r-1"


def test_settings_log_format(monkeypatch) -> None:
    from app.core.config import Settings

    assert Settings().log_format == "json"
    monkeypatch.setenv("MESHPLAN_LOG_FORMAT", "text")
    assert Settings().log_format == "text"
    monkeypatch.setenv("MESHPLAN_LOG_FORMAT", "xml")
    import pydantic
    import pytest

    with pytest.raises(pydantic.ValidationError):
        Settings()
