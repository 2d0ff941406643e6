"""`meshplan_client`: the sync client against the real app served by uvicorn on loopback, the
async client against the real app over `httpx.ASGITransport` (lifespan entered by the test),
and `httpx.MockTransport` for what the service does not do yet or cannot be made to do on
demand (cursor pages, ETags, SSE, connection failures, exports)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

import meshplan_client
from app.main import create_app
from meshplan_client import (
    AsyncMeshplanClient,
    Conflict,
    Estimate,
    Export,
    Framework,
    InvalidInput,
    MeshplanClient,
    MeshplanConnectionError,
    MeshplanError,
    NotFound,
    Plan,
    Search,
    SearchTimeout,
)
from meshplan_client._base import SSEDecoder, next_page_params
from tests.support import TINY_CLUSTER, TINY_MODEL, TINY_WORKLOAD

H100_GIB = 81559 / 1024
"""nvidia-smi memory.total of an H100 SXM5 80GB (81559 MiB), in GiB."""


def _workload(batch: int = 8) -> dict[str, Any]:
    return {**TINY_WORKLOAD, "global_batch_size": batch}


# ---- a real server on loopback ------------------------------------------------------------
class Recording(httpx.BaseTransport):
    """A real HTTP transport that remembers every request it sent."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def server_url(settings_factory: Callable[..., Any]) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(settings_factory()), log_config=None, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()


@pytest.fixture
def mp(server_url: str) -> Iterator[MeshplanClient]:
    with MeshplanClient(server_url, timeout=30) as client:
        yield client


def test_the_package_imports_none_of_the_service() -> None:
    code = (
        "import sys, meshplan_client\n"
        "ours = {'app', 'solver', 'cost_models', 'hardware_catalog', 'specs'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & ours))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    assert result.stdout.strip() == "[]"


def test_public_names_are_pinned() -> None:
    assert sorted(meshplan_client.__all__) == sorted(
        [
            "Accelerator",
            "AsyncMeshplanClient",
            "Calibration",
            "Conflict",
            "Estimate",
            "Export",
            "FieldError",
            "Framework",
            "FrameworkOption",
            "Health",
            "InvalidInput",
            "Measurement",
            "MeshplanClient",
            "MeshplanConnectionError",
            "MeshplanError",
            "Metrics",
            "ModelInfo",
            "NotFound",
            "Parallelism",
            "Placement",
            "Plan",
            "PlanWarning",
            "Problem",
            "Progress",
            "Search",
            "SearchTimeout",
            "ServingInstance",
            "ServingParallelism",
            "Violation",
            "__version__",
        ]
    )
    for name in meshplan_client.__all__:
        assert hasattr(meshplan_client, name), name


def test_catalog_calls_are_typed(mp: MeshplanClient) -> None:
    health = mp.health()
    assert (health.status, health.database) == ("ok", "sqlite")
    h100 = mp.get_hardware("H100")  # an alias
    assert h100.id == "h100-sxm"
    assert h100.memory_gib == pytest.approx(H100_GIB)
    # NVIDIA prints 1,979 BF16 TFLOPS "with sparsity"; the dense peak is half
    assert h100.peak_tflops["bf16"] == pytest.approx(1979 / 2, rel=1e-3)
    assert "h100-sxm" in {a.id for a in mp.list_hardware()}
    assert mp.get_preset("llama3-8b").num_parameters == 8_030_261_248  # HF safetensors count
    assert "llama3-70b" in {p.name for p in mp.list_presets()}
    # tiny: untied embedding + head 2·1000·256; per layer q,o 256², k,v 256·(4 heads·32),
    # gated MLP 3·256·1024, two norms 2·256; final norm 256
    per_layer = 2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 1024 + 2 * 256
    assert mp.resolve_model(TINY_MODEL).num_parameters == 2 * 1000 * 256 + 4 * per_layer + 256


def test_framework_calls_are_typed(mp: MeshplanClient) -> None:
    frameworks = mp.list_frameworks()
    assert all(isinstance(f, Framework) for f in frameworks)
    assert [f.name for f in frameworks] == [
        "deepspeed",
        "fsdp",
        "megatron_core",
        "megatron_lm",
        "torchtitan",
    ]
    deepspeed = mp.get_framework("deepspeed")
    assert (deepspeed.label, deepspeed.launchers) == ("DeepSpeed", ["deepspeed"])
    assert deepspeed.zero_stages == [0, 1, 2, 3] and deepspeed.supports_moe
    # DeepSpeed communicates bf16 gradients (2 bytes) and all-reduces 5e8-element buckets
    assert deepspeed.config["grad_reduce_bytes"].default == 2.0
    assert deepspeed.config["grad_bucket_elements"].default == 5e8
    assert deepspeed.config["grad_reduce_bytes"].json_schema["maximum"] == 8
    # legacy Megatron-LM predates ZeRO-2/3 and MoE in Megatron
    legacy = mp.get_framework("megatron_lm")
    assert legacy.zero_stages == [0, 1] and not legacy.supports_moe
    with pytest.raises(NotFound) as missing:
        mp.get_framework("jax")
    assert missing.value.type == "https://meshplan.dev/problems/unknown-catalog-entry"


def test_a_stored_plan_is_priced_again_for_its_own_framework(mp: MeshplanClient) -> None:
    search = mp.create_search(
        TINY_MODEL,
        TINY_CLUSTER,
        _workload(),
        constraints={"fixed": {"framework": "torchtitan"}},
        top_k=1,
        wait=30,
    )
    assert search.succeeded
    (plan,) = mp.list_plans(search.id)
    assert plan.framework == "torchtitan"
    assert plan.plan_fields()["framework"] == "torchtitan"
    priced = mp.estimate(TINY_MODEL, TINY_CLUSTER, _workload(), plan)
    assert priced.plan["framework"] == "torchtitan"
    assert priced.metrics is not None
    assert priced.metrics.step_time_s == pytest.approx(plan.metrics.step_time_s, rel=1e-9)
    with pytest.raises(InvalidInput) as bad:
        mp.estimate(TINY_MODEL, TINY_CLUSTER, _workload(), {**plan.plan_fields(), "framework": "x"})
    assert [(e.field, e.value) for e in bad.value.errors] == [("plan.framework", "x")]


def test_a_stored_vocabulary_parallel_plan_is_priced_again_as_stored(mp: MeshplanClient) -> None:
    """`plan_fields()` carries every plan field: the top Llama-3-70B plan on 64 H100 is
    vocabulary-parallel, and without the field it re-priced 22 % slower."""
    model = {"preset": "llama3-70b"}
    cluster = {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8}]}
    workload = {"kind": "training", "global_batch_size": 1024, "sequence_length": 4096}
    forks = {"research_forks": True}
    search = mp.create_search(model, cluster, workload, constraints=forks, top_k=3, wait=30)
    assert search.succeeded
    plans = mp.list_plans(search.id)
    assert any(p.vocab_parallel for p in plans)
    for plan in plans:
        assert plan.plan_fields()["vocab_parallel"] == plan.vocab_parallel
        priced = mp.estimate(model, cluster, workload, plan)
        assert priced.metrics is not None
        assert priced.metrics.step_time_s == pytest.approx(plan.metrics.step_time_s, rel=1e-9)


def test_problems_become_typed_exceptions(mp: MeshplanClient) -> None:
    with pytest.raises(NotFound) as missing:
        mp.get_hardware("h999")
    assert missing.value.status == 404
    assert missing.value.type == "https://meshplan.dev/problems/unknown-catalog-entry"
    with pytest.raises(NotFound):
        mp.get_search("no-such-search")
    with pytest.raises(InvalidInput) as bad:
        mp.create_search(TINY_MODEL, TINY_CLUSTER, _workload(batch=-8))
    assert bad.value.status == 422
    assert "workload.global_batch_size" in [e.field for e in bad.value.errors]
    assert "workload.global_batch_size" in str(bad.value)
    done = mp.create_search(TINY_MODEL, TINY_CLUSTER, _workload(), wait=30)
    assert done.status == "succeeded"
    with pytest.raises(Conflict) as finished:
        mp.cancel_search(done.id)
    assert finished.value.status == 409 and isinstance(finished.value, MeshplanError)


def test_search_plans_and_estimate_round_trip(mp: MeshplanClient) -> None:
    search = mp.create_search(
        "llama3-8b",
        {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}]},
        {"kind": "training", "global_batch_size": 64, "sequence_length": 2048},
        top_k=3,
        wait=30,
    )
    assert isinstance(search, Search) and search.succeeded and search.num_plans == 3
    plans = mp.list_plans(search.id)
    assert [p.rank for p in plans] == [1, 2, 3]
    for plan in plans:
        par = plan.parallelism
        assert par is not None and not plan.is_serving
        assert par.data * par.tensor * par.pipeline * par.context == 8
        # tokens/s = global batch × sequence length / step time
        assert plan.metrics.tokens_per_s == pytest.approx(64 * 2048 / plan.metrics.step_time_s)
    steps = [p.metrics.step_time_s for p in plans]
    assert steps == sorted(steps)
    best = mp.get_plan(plans[0].id)
    assert best == plans[0]
    # pricing the stored plan again gives its stored step time
    priced = mp.estimate(
        "llama3-8b",
        {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}]},
        {"kind": "training", "global_batch_size": 64, "sequence_length": 2048},
        best,
    )
    assert isinstance(priced, Estimate) and priced.feasible
    assert priced.metrics is not None
    assert priced.metrics.step_time_s == pytest.approx(best.metrics.step_time_s, rel=1e-9)


def test_serving_plans_are_typed(mp: MeshplanClient) -> None:
    search = mp.create_search(
        "llama3-8b",
        {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2}]},
        {
            "kind": "serving",
            "prompt_tokens": 512,
            "output_tokens": 128,
            "slo": {"ttft_ms": 300, "tpot_ms": 30},
            "num_requests": 100,
        },
        top_k=2,
        wait=30,
    )
    assert search.succeeded
    for plan in mp.list_plans(search.id):
        assert plan.is_serving and plan.parallelism is None and plan.instances
        m = plan.metrics
        gpus = sum(
            i.count * i.parallelism.tensor * i.parallelism.pipeline * i.parallelism.expert
            for i in plan.instances
        )
        assert m.gpus_used == gpus <= 2
        assert m.goodput_rps_per_gpu == pytest.approx(m.goodput_rps / gpus)
        assert set(plan.plan_fields()) == {"mode", "instances"}


def test_wait_for_search_reports_progress(mp: MeshplanClient) -> None:
    started = mp.create_search(TINY_MODEL, TINY_CLUSTER, _workload(16))
    seen: list[Search] = []
    final = mp.wait_for_search(started.id, timeout=30, poll_interval=0.02, on_progress=seen.append)
    assert final.status == "succeeded" and seen[-1].status == "succeeded"
    evaluated = [s.progress.evaluated for s in seen]
    assert evaluated == sorted(evaluated)
    assert final.progress.total is not None and final.progress.evaluated == final.progress.total


@pytest.mark.usefixtures("slow_solver")
def test_wait_for_search_times_out_then_cancel(mp: MeshplanClient) -> None:
    started = mp.create_search(TINY_MODEL, TINY_CLUSTER, _workload(24))
    t0 = time.monotonic()
    with pytest.raises(SearchTimeout) as late:
        mp.wait_for_search(started.id, timeout=0.3, poll_interval=0.05)
    assert 0.3 <= time.monotonic() - t0 < 5
    assert late.value.search.id == started.id and not late.value.search.finished
    mp.cancel_search(started.id)
    assert mp.wait_for_search(started.id, timeout=15, poll_interval=0.05).status == "cancelled"


def test_list_searches_iterates_every_page(server_url: str) -> None:
    recording = Recording()
    with MeshplanClient(server_url, transport=recording) as mp:
        made = [
            mp.create_search(TINY_MODEL, TINY_CLUSTER, _workload(8 * (i + 1)), wait=30).id
            for i in range(5)
        ]
        recording.requests.clear()
        listed = [s.id for s in mp.list_searches(page_size=2)]
        assert listed == made[::-1]  # newest first, each once
        assert len(recording.requests) == 3  # pages of 2, 2 and 1
        assert [s.id for s in mp.list_searches(page_size=2, max_items=3)] == made[::-1][:3]
        assert [s.id for s in mp.list_searches(status="failed")] == []


@pytest.fixture
def delayed_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Searches take at least 0.5 s, so a wait always finds them unfinished."""
    from app.services import planning

    real_search = planning.solver.search

    def delayed(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.5)
        return real_search(*args, **kwargs)

    monkeypatch.setattr(planning.solver, "search", delayed)


@pytest.mark.usefixtures("delayed_solver")
def test_wait_with_events_against_the_service(server_url: str) -> None:
    recording = Recording()
    with MeshplanClient(server_url, transport=recording) as mp:
        started = mp.create_search(TINY_MODEL, TINY_CLUSTER, _workload(40))
        seen: list[Search] = []
        final = mp.wait_for_search(
            started.id, timeout=30, poll_interval=0.05, on_progress=seen.append, use_events=True
        )
    assert not seen[0].finished and final.succeeded and seen[-1].succeeded
    paths = [r.url.path for r in recording.requests]
    assert f"/v1/searches/{started.id}/events" in paths
    evaluated = [s.progress.evaluated for s in seen]
    assert evaluated == sorted(evaluated) and evaluated[-1] == final.progress.total


def test_measurements_calibration_and_placements(mp: MeshplanClient) -> None:
    search = mp.create_search(TINY_MODEL, TINY_CLUSTER, _workload(32), top_k=1, wait=30)
    plan = mp.list_plans(search.id)[0]
    predicted = plan.metrics.step_time_s
    assert predicted is not None
    stored = mp.create_measurement(plan.id, step_time_s=predicted * 1.1, notes="run 1")
    assert stored.error == pytest.approx(0.1)  # measured / predicted − 1
    assert stored.tokens_per_s == pytest.approx(32 * 512 / (predicted * 1.1))
    assert [m.id for m in mp.list_measurements(plan.id)] == [stored.id]
    calibration = mp.calibration("h100-sxm")
    assert calibration.num_samples == 1
    # one measurement supports no fitted parameter: nothing fitted, every parameter says why
    assert calibration.max_parameters == 0
    assert calibration.fitted == [] and calibration.uncertainty == {}
    assert calibration.not_fitted["h100-sxm.scale_out_efficiency"]  # one node: no network
    assert len(calibration.not_fitted) == 5
    # two ranks of two expert slots: the best split of each layer, by hand —
    # layer 0 {132, 40} | {90, 61} → max 172 of mean 161.5;
    # layer 1 {20, 107} | {104, 64} → max 168 of mean 147.5
    placement = mp.expert_placements(
        [[90, 132, 40, 61], [20, 107, 104, 64]], num_ranks=2, ranks_per_node=2
    )
    assert placement.status == "optimal"
    assert placement.max_imbalance == pytest.approx(168 / 147.5, rel=1e-6)
    assert [max(layer["rank_loads"]) for layer in placement.layers] == [172, 168]


def test_unreachable_service(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with MeshplanClient(f"http://127.0.0.1:{port}", retries=1, retry_backoff_s=0) as mp:
        with pytest.raises(MeshplanConnectionError) as down:
            mp.health()
    assert "cannot reach" in str(down.value) and down.value.status is None


# ---- mocked transports ----------------------------------------------------------------------
def _search_body(
    sid: str, status: str = "running", evaluated: int = 0, total: int | None = None
) -> dict[str, Any]:
    return {
        "id": sid,
        "status": status,
        "progress": {"evaluated": evaluated, "total": total},
        "stats": {},
        "error": None,
    }


def test_cursor_pages_follow_next_cursor() -> None:
    seen: list[dict[str, str]] = []
    pages = {None: (["a", "b"], "c1"), "c1": (["c", "d"], "c2"), "c2": (["e"], None)}

    def handler(request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        seen.append(params)
        ids, cursor = pages[params.get("cursor")]
        return httpx.Response(
            200, json={"items": [_search_body(i) for i in ids], "next_cursor": cursor}
        )

    with MeshplanClient("http://x", transport=httpx.MockTransport(handler)) as mp:
        assert [s.id for s in mp.list_searches(page_size=2)] == ["a", "b", "c", "d", "e"]
    assert seen == [{"limit": "2"}, {"limit": "2", "cursor": "c1"}, {"limit": "2", "cursor": "c2"}]


def test_offset_pages_stop_at_total() -> None:
    assert next_page_params({"items": [1, 2], "total": 5}, {"limit": 2}) == {
        "limit": 2,
        "offset": 2,
    }
    assert next_page_params({"items": [1], "total": 5}, {"limit": 2, "offset": 4}) is None
    assert next_page_params({"items": []}, {"limit": 2, "offset": 4}) is None
    assert next_page_params({"items": [1], "next_cursor": None}, {"limit": 2}) is None


def test_etag_revalidation_answers_from_the_cache() -> None:
    sent: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("if-none-match"))
        if request.headers.get("if-none-match") == '"v1"':
            return httpx.Response(304, headers={"ETag": '"v1"'})
        return httpx.Response(
            200, json=_search_body("s1", "succeeded", 3, 3), headers={"ETag": '"v1"'}
        )

    with MeshplanClient("http://x", transport=httpx.MockTransport(handler)) as mp:
        first, second = mp.get_search("s1"), mp.get_search("s1")
    assert sent == [None, '"v1"']
    assert first == second and second.progress.evaluated == 3


def test_connect_errors_are_retried_for_idempotent_calls_only() -> None:
    calls: list[tuple[str, str | None]] = []
    failures = {"left": 2}

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append((request.method, request.headers.get("idempotency-key")))
        if failures["left"]:
            failures["left"] -= 1
            raise httpx.ConnectError("refused", request=request)
        if request.method == "POST":
            return httpx.Response(202, json=_search_body("s1", "queued"))
        return httpx.Response(200, json={"status": "ok", "version": "t", "database": "sqlite"})

    with MeshplanClient(
        "http://x", transport=httpx.MockTransport(handler), retries=2, retry_backoff_s=0
    ) as mp:
        assert mp.health().status == "ok"
        assert len(calls) == 3
        calls.clear()
        failures["left"] = 1
        with pytest.raises(MeshplanConnectionError):
            mp.create_search("tiny", TINY_CLUSTER, TINY_WORKLOAD)
        assert calls == [("POST", None)]  # a POST without a key is never resent
        calls.clear()
        failures["left"] = 1
        assert (
            mp.create_search("tiny", TINY_CLUSTER, TINY_WORKLOAD, idempotency_key="k-1").status
            == "queued"
        )
        assert calls == [("POST", "k-1"), ("POST", "k-1")]


def test_create_search_sends_wait_key_and_callback() -> None:
    captured: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        captured.append(request)
        return httpx.Response(201, json=_search_body("s9", "succeeded", 1, 1))

    with MeshplanClient("http://x", transport=httpx.MockTransport(handler)) as mp:
        found = mp.create_search(
            "llama3-8b",
            TINY_CLUSTER,
            TINY_WORKLOAD,
            top_k=3,
            wait=12.5,
            idempotency_key="abc",
            callback_url="https://hooks.example/meshplan",
        )
    assert found.succeeded
    request = captured[0]
    assert request.url.params["wait"] == "12.5"
    assert request.headers["idempotency-key"] == "abc"
    assert json.loads(request.content) == {
        "model": {"preset": "llama3-8b"},
        "cluster": TINY_CLUSTER,
        "workload": TINY_WORKLOAD,
        "top_k": 3,
        "callback_url": "https://hooks.example/meshplan",
    }


def test_export_is_typed_and_refusals_name_the_rule(tmp_path: Path) -> None:
    script = "#!/bin/bash\n#SBATCH --nodes=8\nsrun torchrun train.py\n"

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/plans/p1/export/slurm":
            assert dict(request.url.params) == {"partition": "gpu", "exclusive": "true"}
            return httpx.Response(
                200,
                json={
                    "format": "slurm",
                    "filename": "launch.sbatch",
                    "content": script,
                    "args": ["--nodes", "8"],
                    "env": {"NCCL_DEBUG": "WARN"},
                },
            )
        return httpx.Response(
            422,
            headers={"content-type": "application/problem+json"},
            json={
                "type": "https://meshplan.dev/problems/export-rule",
                "title": "Cannot export",
                "status": 422,
                "detail": "num_attention_heads (64) must be divisible by "
                "tensor_model_parallel_size (3)",
                "instance": request.url.path,
            },
        )

    with MeshplanClient("http://x", transport=httpx.MockTransport(handler)) as mp:
        rendered = mp.export_plan("p1", "slurm", partition="gpu", exclusive=True)
        with pytest.raises(InvalidInput) as refused:
            mp.export_plan("p1", "megatron")
    assert isinstance(rendered, Export) and rendered.args == ["--nodes", "8"]
    assert rendered.command_line() == "NCCL_DEBUG=WARN --nodes 8"
    path = rendered.write(tmp_path / "job.sbatch")
    assert path.read_text() == script and path.stat().st_mode & 0o111
    assert "divisible by tensor_model_parallel_size" in refused.value.detail


def test_a_non_problem_error_answer_still_raises() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(502, text="bad gateway"))
    with (
        MeshplanClient("http://x", transport=transport) as mp,
        pytest.raises(MeshplanError) as failed,
    ):
        mp.get_plan("p1")
    assert failed.value.status == 502 and failed.value.title == "Bad Gateway"
    assert failed.value.detail == "bad gateway"


def test_sse_decoder_follows_the_event_stream_rules() -> None:
    decoder = SSEDecoder()
    lines = [
        ": keep-alive",
        "event: progress",
        'data: {"evaluated": 3,',
        'data:  "total": 9}',
        "id: 7",
        "",
        "",
        "data: plain",
        "",
    ]
    events = [e for e in (decoder.feed(line) for line in lines) if e is not None]
    assert [(e.event, e.data, e.id) for e in events] == [
        ("progress", '{"evaluated": 3,\n "total": 9}', "7"),
        ("message", "plain", "7"),
    ]


def _events_handler(
    stream: str, final: dict[str, Any]
) -> Callable[[httpx.Request], httpx.Response]:
    reads = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            if not stream:
                return httpx.Response(404, json={"title": "Not Found", "status": 404})
            return httpx.Response(
                200, content=stream.encode(), headers={"content-type": "text/event-stream"}
            )
        reads["n"] += 1
        body = _search_body("s1", "running", 0, 9) if reads["n"] == 1 else final
        return httpx.Response(200, json=body)

    return handler


def test_wait_follows_server_sent_events() -> None:
    stream = (
        'event: progress\ndata: {"evaluated": 3, "total": 9}\n\n'
        'event: progress\ndata: {"status": "running", "progress": '
        '{"evaluated": 6, "total": 9}}\n\n'
        "event: succeeded\ndata: {}\n\n"
    )
    final = _search_body("s1", "succeeded", 9, 9)
    seen: list[tuple[str, int]] = []
    with MeshplanClient(
        "http://x", transport=httpx.MockTransport(_events_handler(stream, final))
    ) as mp:
        result = mp.wait_for_search(
            "s1",
            use_events=True,
            poll_interval=0.01,
            timeout=10,
            on_progress=lambda s: seen.append((s.status, s.progress.evaluated)),
        )
    assert result.status == "succeeded" and result.progress.evaluated == 9
    # the stream's updates, then the stored search re-read at the end
    assert seen == [
        ("running", 0),
        ("running", 3),
        ("running", 6),
        ("succeeded", 6),
        ("succeeded", 9),
    ]


def test_wait_falls_back_to_polling_without_events() -> None:
    final = _search_body("s1", "failed", 2, 9)
    final["error"] = {
        "type": "https://meshplan.dev/problems/no-feasible-plan",
        "title": "No feasible plan",
        "status": 422,
        "detail": "nothing fits",
    }
    with MeshplanClient(
        "http://x", transport=httpx.MockTransport(_events_handler("", final))
    ) as mp:
        result = mp.wait_for_search("s1", use_events=True, poll_interval=0.01, timeout=10)
    assert result.status == "failed" and result.error is not None
    assert result.error.detail == "nothing fits"


# ---- async ------------------------------------------------------------------------------------
def test_async_client_against_the_app(settings_factory: Callable[..., Any]) -> None:
    async def scenario() -> None:
        app = create_app(settings_factory())
        async with (
            app.router.lifespan_context(app),
            AsyncMeshplanClient(
                "http://meshplan.test", transport=httpx.ASGITransport(app=app)
            ) as mp,
        ):
            assert (await mp.health()).status == "ok"
            titan = await mp.get_framework("torchtitan")
            assert titan.launchers == ["torchtitan"] and titan.zero_stages == [0, 2, 3]
            assert "torchtitan" in [f.name for f in await mp.list_frameworks()]
            ids = []
            for batch in (8, 16, 24):
                started = await mp.create_search(
                    TINY_MODEL, TINY_CLUSTER, _workload(batch), top_k=2
                )
                seen: list[int] = []

                async def note(search: Search, seen: list[int] = seen) -> None:
                    seen.append(search.progress.evaluated)

                done = await mp.wait_for_search(
                    started.id, timeout=30, poll_interval=0.02, on_progress=note
                )
                assert done.succeeded and seen == sorted(seen)
                ids.append(done.id)
            listed = [s.id async for s in mp.list_searches(page_size=2)]
            assert listed == ids[::-1]
            plans = await mp.list_plans(ids[0])
            assert [p.rank for p in plans] == [1, 2]
            assert all(isinstance(p, Plan) for p in plans)
            assert (await mp.get_plan(plans[0].id)).id == plans[0].id
            with pytest.raises(NotFound):
                await mp.get_plan("missing")
            with pytest.raises(InvalidInput):
                await mp.estimate(TINY_MODEL, TINY_CLUSTER, TINY_WORKLOAD, {"zero_stage": 9})

    asyncio.run(scenario())


def test_async_client_cursor_pages_and_events() -> None:
    pages = {None: (["a", "b"], "c1"), "c1": (["c"], None)}
    search_events = _events_handler(
        "event: succeeded\ndata: {}\n\n", _search_body("s1", "succeeded", 9, 9)
    )

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/searches":
            ids, cursor = pages[request.url.params.get("cursor")]
            return httpx.Response(
                200, json={"items": [_search_body(i) for i in ids], "next_cursor": cursor}
            )
        return search_events(request)

    async def scenario() -> tuple[list[str], Search]:
        async with AsyncMeshplanClient("http://x", transport=httpx.MockTransport(handler)) as mp:
            ids = [s.id async for s in mp.list_searches(page_size=2)]
            return ids, await mp.wait_for_search(
                "s1", use_events=True, poll_interval=0.01, timeout=10
            )

    ids, final = asyncio.run(scenario())
    assert ids == ["a", "b", "c"] and final.status == "succeeded"
