"""The `meshplan` CLI: --cluster parsing, the in-process search table, clean errors with exit
code 2, and --url mode against a real server (uvicorn in a thread); `searches`, `plans`,
`estimate` and `export` (over `httpx.MockTransport` until the export route is served), ids
that persist between in-process commands, and serving searches."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
import uvicorn
from typer.testing import CliRunner

import app.cli as cli_module
from app.cli import cli, parse_cluster, parse_model
from app.main import create_app
from meshplan_client import MeshplanClient
from tests.support import TINY_MODEL

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


@pytest.fixture(autouse=True)
def _local_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process commands use a database of their own under tmp_path (never ./var/)."""
    monkeypatch.setenv("MESHPLAN_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("MESHPLAN_URL", raising=False)
    monkeypatch.delenv("MESHPLAN_SEARCH_EXECUTOR", raising=False)


def test_parse_cluster() -> None:
    assert parse_cluster("h100-sxm:8x8") == {
        "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8, "gpus_per_node": 8}]
    }
    assert parse_cluster("mi300x:2X4")["node_groups"][0]["gpus_per_node"] == 4
    mixed = parse_cluster("h100-sxm:8x8, a100-80gb:4x8")
    assert mixed == {
        "node_groups": [
            {"accelerator": "h100-sxm", "num_nodes": 8, "gpus_per_node": 8},
            {"accelerator": "a100-80gb", "num_nodes": 4, "gpus_per_node": 8},
        ]
    }
    for bad in ("h100-sxm", "h100-sxm:8", "h100-sxm:8x", ":8x8", "h100:0x8", "h100:axb",
                "h100-sxm:8x8,", "h100-sxm:8x8,a100"):  # fmt: skip
        with pytest.raises(typer.BadParameter):
            parse_cluster(bad)


def test_parse_model(tmp_path: Path) -> None:
    assert parse_model("llama3-70b") == {"preset": "llama3-70b"}
    explicit = tmp_path / "tiny.json"
    explicit.write_text(json.dumps(TINY_MODEL))
    assert parse_model(str(explicit)) == TINY_MODEL
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    assert parse_model(str(hf)) == {"hf_config": {"model_type": "llama", "hidden_size": 64}}


def _tiny_file(tmp_path: Path) -> str:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY_MODEL))
    return str(path)


def _rows(output: str) -> list[list[str]]:
    """Table body rows: the cells between the │ separators; the continuation lines of a
    wrapped row (its first cell empty) are joined to it."""
    rows: list[list[str]] = []
    for line in output.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if rows and not cells[0]:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    return rows


def test_search_in_process_prints_a_ranked_table(tmp_path: Path) -> None:
    result = runner.invoke(
        cli,
        [
            "search",
            "--model",
            _tiny_file(tmp_path),
            "--cluster",
            "h100-sxm:1x4",
            "--global-batch",
            "8",
            "--seq",
            "512",
            "--top-k",
            "3",
        ],
        env=WIDE,
    )
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout)
    assert [r[0] for r in rows] == ["1", "2", "3"]
    for row in rows:
        degrees = [int(d) for d in row[1].split("/")]
        dp, tp, pp, _vp, cp = degrees
        assert dp * tp * pp * cp == 4
        step_s, tokens_per_s = float(row[5]), float(row[6].replace(",", ""))
        # tokens/s = 8 × 512 tokens / step time (printed to 4 significant digits)
        assert tokens_per_s == pytest.approx(8 * 512 / step_s, rel=2e-3)
    steps = [float(r[5]) for r in rows]
    assert steps == sorted(steps)


def test_search_json_output(tmp_path: Path) -> None:
    result = runner.invoke(
        cli,
        [
            "search",
            "--model",
            _tiny_file(tmp_path),
            "--cluster",
            "h100-sxm:1x4",
            "--global-batch",
            "8",
            "--seq",
            "512",
            "--top-k",
            "2",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert [p["rank"] for p in body["plans"]] == [1, 2]
    assert body["stats"]["wall_time_s"] >= 0


def test_bad_cluster_syntax_exits_2() -> None:
    result = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100x8",
            "--global-batch",
            "8",
            "--seq",
            "512",
        ],
    )
    assert result.exit_code == 2
    assert "ACCELERATOR:NODESxGPUS" in result.output
    assert "Traceback" not in result.output


def test_unknown_preset_exits_2_with_a_clean_message() -> None:
    result = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "llama3-9b",
            "--cluster",
            "h100-sxm:1x8",
            "--global-batch",
            "8",
            "--seq",
            "512",
        ],
    )
    assert result.exit_code == 2
    assert "unknown model preset" in result.output
    assert "Traceback" not in result.output


def test_unknown_accelerator_and_bad_batch_exit_2() -> None:
    result = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "llama3-8b",
            "--cluster",
            "h999:1x8",
            "--global-batch",
            "8",
            "--seq",
            "512",
        ],
    )
    assert result.exit_code == 2 and "cluster.node_groups.0.accelerator" in result.output
    result = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm:1x8",
            "--global-batch",
            "-8",
            "--seq",
            "512",
        ],
    )
    assert result.exit_code == 2 and "global_batch_size" in result.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def server_url(settings_factory: Any) -> Iterator[str]:
    port = _free_port()
    config = uvicorn.Config(
        create_app(settings_factory()),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
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


def test_search_against_a_running_service(server_url: str, tmp_path: Path) -> None:
    result = runner.invoke(
        cli,
        [
            "search",
            "--model",
            _tiny_file(tmp_path),
            "--cluster",
            "h100-sxm:1x4",
            "--global-batch",
            "8",
            "--seq",
            "512",
            "--top-k",
            "2",
            "--url",
            server_url,
            "--poll",
            "0.05",
        ],
        env=WIDE,
    )
    assert result.exit_code == 0, result.output
    assert [r[0] for r in _rows(result.stdout)] == ["1", "2"]
    bad = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "llama3-9b",
            "--cluster",
            "h100-sxm:1x4",
            "--global-batch",
            "8",
            "--seq",
            "512",
            "--url",
            server_url,
        ],
    )
    assert bad.exit_code == 2 and "model.preset" in bad.output


def test_unreachable_service_exits_2() -> None:
    result = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm:1x8",
            "--global-batch",
            "8",
            "--seq",
            "512",
            "--url",
            f"http://127.0.0.1:{_free_port()}",
        ],
    )
    assert result.exit_code == 2 and "cannot reach" in result.output


# ---- searches, plans, estimate, export ---------------------------------------------------
TINY_SEARCH = ["--cluster", "h100-sxm:1x4", "--global-batch", "8", "--seq", "512"]


def _search_json(tmp_path: Path, *extra: str) -> dict[str, Any]:
    result = runner.invoke(
        cli, ["search", "--model", _tiny_file(tmp_path), *TINY_SEARCH, "--json", *extra]
    )
    assert result.exit_code == 0, result.output
    body: dict[str, Any] = json.loads(result.stdout)
    return body


def test_in_process_ids_persist_between_commands(tmp_path: Path) -> None:
    first = _search_json(tmp_path, "--top-k", "3")
    search_id = first["search"]["id"]
    assert first["search"]["status"] == "succeeded"
    # a second command starts a new in-process service over the same database
    listed = runner.invoke(cli, ["plans", search_id, "--json"])
    assert listed.exit_code == 0, listed.output
    assert [p["id"] for p in json.loads(listed.stdout)] == [p["id"] for p in first["plans"]]
    table = runner.invoke(cli, ["plans", search_id, "--wide"], env=WIDE)
    assert table.exit_code == 0, table.output
    rows = _rows(table.stdout)
    assert [r[0] for r in rows] == [p["id"] for p in first["plans"]]
    assert [r[1] for r in rows] == ["1", "2", "3"]
    searches = runner.invoke(cli, ["searches", "--json"])
    assert [s["id"] for s in json.loads(searches.stdout)] == [search_id]
    wide = runner.invoke(cli, ["searches"], env=WIDE)
    assert search_id in wide.stdout and "succeeded" in wide.stdout


def test_tables_at_80_columns_keep_ids_numbers_and_plan_counts_whole(tmp_path: Path) -> None:
    """Against the in-process service: `searches` shows the search's plan count (the API's
    `num_plans`), `plans` keeps ids and figures whole at 80 columns, `--wide` adds the rest."""
    body = _search_json(tmp_path, "--top-k", "3")
    search_id, plans = body["search"]["id"], body["plans"]
    narrow = {"COLUMNS": "80"}
    listed = runner.invoke(cli, ["searches"], env=narrow)
    assert listed.exit_code == 0, listed.output
    assert _rows(listed.stdout)[0][:3] == [search_id, "succeeded", str(len(plans))]
    as_json = json.loads(runner.invoke(cli, ["searches", "--json"]).stdout)
    assert as_json[0]["num_plans"] == len(plans)
    for extra in ([], ["--wide"]):
        shown = runner.invoke(cli, ["plans", search_id, *extra], env=narrow)
        assert shown.exit_code == 0, shown.output
        assert "…" not in shown.stdout
        if not extra:
            assert max(len(line) for line in shown.stdout.splitlines()) <= 80
        for plan in plans:
            tokens = f"{plan['metrics']['tokens_per_s']:,.0f}"
            assert plan["id"] in shown.stdout and tokens in shown.stdout
    assert "explanation" in shown.stdout and "schedule" in shown.stdout  # --wide


def test_search_table_names_the_search_and_best_plan(tmp_path: Path) -> None:
    result = runner.invoke(
        cli, ["search", "--model", _tiny_file(tmp_path), *TINY_SEARCH, "--top-k", "1"], env=WIDE
    )
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    search_id, plan_id = last.split()[1].rstrip(";"), last.split()[-1]
    shown = json.loads(runner.invoke(cli, ["plans", search_id, "--json"]).stdout)
    assert [p["id"] for p in shown] == [plan_id]


def test_serving_search_in_process() -> None:
    result = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm:1x2",
            "--serving",
            "--prompt-tokens",
            "512",
            "--output-tokens",
            "128",
            "--ttft-ms",
            "300",
            "--tpot-ms",
            "30",
            "--top-k",
            "2",
            "--objective",
            "max_goodput_per_gpu",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["search"]["workload"]["kind"] == "serving"
    assert body["search"]["workload"]["slo"]["ttft_ms"] == 300
    per_gpu = []
    for plan in body["plans"]:
        m = plan["metrics"]
        assert plan["instances"] and m["gpus_used"] <= 2
        assert m["goodput_rps_per_gpu"] == pytest.approx(m["goodput_rps"] / m["gpus_used"])
        per_gpu.append(m["goodput_rps_per_gpu"])
    assert per_gpu == sorted(per_gpu, reverse=True)  # best goodput per GPU first
    table = runner.invoke(cli, ["plans", body["search"]["id"], "--wide"], env=WIDE)
    assert table.exit_code == 0, table.output
    rows = _rows(table.stdout)
    assert [r[1] for r in rows] == ["1", "2"]
    assert "×both" in rows[0][2] or "×prefill" in rows[0][2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", "h100-sxm:1x4", "--seq", "512"], "--global-batch and --seq"),
        (
            ["--cluster", "h100-sxm:1x4", "--serving", "--prompt-tokens", "64"],
            "--prompt-tokens and --output-tokens",
        ),
        (
            ["--cluster", "h100-sxm:1x4", "--global-batch", "8", "--seq", "512", "--no-wait"],
            "--no-wait needs --url",
        ),
    ],
)
def test_incomplete_workloads_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(cli, ["search", "--model", "llama3-8b", *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_plans_of_an_unknown_search_exits_2() -> None:
    result = runner.invoke(cli, ["plans", "no-such-search"])
    assert result.exit_code == 2
    assert "no search with id 'no-such-search'" in result.output


def test_estimate_a_stored_plan_by_id_and_file(tmp_path: Path) -> None:
    body = _search_json(tmp_path, "--top-k", "1")
    plan = body["plans"][0]
    by_id = runner.invoke(
        cli,
        [
            "estimate",
            "--model",
            _tiny_file(tmp_path),
            *TINY_SEARCH[:2],
            "--global-batch",
            "8",
            "--seq",
            "512",
            "--plan",
            plan["id"],
            "--json",
        ],
    )
    assert by_id.exit_code == 0, by_id.output
    priced = json.loads(by_id.stdout)
    assert priced["feasible"] is True
    assert priced["metrics"]["step_time_s"] == pytest.approx(plan["metrics"]["step_time_s"])
    # the stored plan as a file (API shape, with id and metrics) and a workload file
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    workload_file = tmp_path / "workload.json"
    workload_file.write_text(
        json.dumps({"kind": "training", "global_batch_size": 8, "sequence_length": 512})
    )
    by_file = runner.invoke(
        cli,
        [
            "estimate",
            "--model",
            _tiny_file(tmp_path),
            *TINY_SEARCH[:2],
            "--workload",
            str(workload_file),
            "--plan",
            str(plan_file),
        ],
        env=WIDE,
    )
    assert by_file.exit_code == 0, by_file.output
    assert "feasible" in by_file.stdout and "step_time_s" in by_file.stdout


def test_estimate_exit_codes() -> None:
    # 70B parameters with plain data parallelism: weights alone (2 bytes each) exceed 80 GB
    infeasible = runner.invoke(
        cli,
        [
            "estimate",
            "--model",
            "llama3-70b",
            "--cluster",
            "h100-sxm:1x8",
            "--global-batch",
            "16",
            "--seq",
            "4096",
            "--json",
            "--plan",
            '{"parallelism": {"data": 8}, "micro_batch_size": 1, "zero_stage": 0}',
        ],
    )
    assert infeasible.exit_code == 1, infeasible.output
    body = json.loads(infeasible.stdout)
    assert body["feasible"] is False and body["violations"]
    assert body["metrics"]["peak_memory_gib"] > 70.6e9 * 2 / 2**30
    mismatch = runner.invoke(
        cli,
        [
            "estimate",
            "--model",
            "llama3-70b",
            "--cluster",
            "h100-sxm:1x8",
            "--global-batch",
            "16",
            "--seq",
            "4096",
            "--plan",
            '{"parallelism": {"data": 16}, "micro_batch_size": 1}',
        ],
    )
    # more GPUs than the cluster has: nothing to price (fewer run on the first of them,
    # the rest idle: `solver.estimate.estimate_plan`)
    assert mismatch.exit_code == 2
    assert "must equal the cluster's 8 GPUs" in mismatch.output


SCRIPT = "#!/bin/bash\n#SBATCH --nodes=1\nsrun torchrun --nproc-per-node 4 pretrain_gpt.py\n"


@pytest.fixture
def mocked_exports(monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    """`--url` commands go to a MockTransport that answers the export route (API.md)."""
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if request.url.path == "/v1/plans/p1/export/slurm":
            return httpx.Response(
                200,
                json={
                    "format": "slurm",
                    "filename": "launch_slurm.sh",
                    "content": SCRIPT,
                    "args": [],
                    "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
                },
            )
        return httpx.Response(
            422,
            headers={"content-type": "application/problem+json"},
            json={
                "type": "https://meshplan.dev/problems/invalid-input",
                "title": "Invalid input",
                "status": 422,
                "detail": "vllm exports serving plans; p1 is a training plan",
                "instance": request.url.path,
            },
        )

    def client(url: str) -> MeshplanClient:
        return MeshplanClient(url, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(cli_module, "MeshplanClient", client)
    return requests


def test_export_to_a_file_and_to_stdout(
    mocked_exports: list[httpx.Request], tmp_path: Path
) -> None:
    url = ["--url", "http://meshplan.test"]
    out = tmp_path / "job.sh"
    written = runner.invoke(
        cli,
        ["export", "p1", "--format", "slurm", "--out", str(out), "--param", "partition=gpu", *url],
    )
    assert written.exit_code == 0, written.output
    assert out.read_text() == SCRIPT and out.stat().st_mode & 0o111  # executable script
    assert dict(mocked_exports[-1].url.params) == {"partition": "gpu"}
    printed = runner.invoke(cli, ["export", "p1", "-f", "slurm", *url])
    assert printed.exit_code == 0 and printed.stdout == SCRIPT
    whole = runner.invoke(cli, ["export", "p1", "-f", "slurm", "--json", *url])
    assert json.loads(whole.stdout)["env"] == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def test_export_refusal_and_bad_param_exit_2(mocked_exports: list[httpx.Request]) -> None:
    refused = runner.invoke(cli, ["export", "p1", "--format", "vllm", "--url", "http://m.test"])
    assert refused.exit_code == 2
    assert "vllm exports serving plans" in refused.output
    bad = runner.invoke(
        cli, ["export", "p1", "--format", "slurm", "--param", "nokey", "--url", "http://m.test"]
    )
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output


def test_no_wait_then_plans_against_a_service(server_url: str, tmp_path: Path) -> None:
    started = runner.invoke(
        cli,
        ["search", "--model", _tiny_file(tmp_path), *TINY_SEARCH, "--no-wait", "--url", server_url],
    )
    assert started.exit_code == 0, started.output
    search_id = started.stdout.strip()
    with MeshplanClient(server_url) as client:
        assert client.wait_for_search(search_id, timeout=30, poll_interval=0.05).succeeded
    # MESHPLAN_URL selects the service when --url is absent
    listed = runner.invoke(cli, ["plans", search_id, "--json"], env={"MESHPLAN_URL": server_url})
    assert listed.exit_code == 0, listed.output
    assert [p["rank"] for p in json.loads(listed.stdout)] == list(range(1, 11))
    local = runner.invoke(cli, ["plans", search_id])  # the local database has no such search
    assert local.exit_code == 2


EXPORT_ROUTE = "/v1/plans/{plan_id}/export/{format}"


def test_export_a_stored_plan_in_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A real export of a real plan through the in-process service (the exports router is
    added to the app when `app.main` does not register it yet)."""
    import app.main as main_module
    from app.api.routes import exports

    real_create_app = main_module.create_app

    def create_app_with_exports(settings: Any = None) -> Any:
        built = real_create_app(settings)
        if not any(getattr(r, "path", None) == EXPORT_ROUTE for r in built.routes):
            built.include_router(exports.router)
        return built

    monkeypatch.setattr(main_module, "create_app", create_app_with_exports)
    body = _search_json(tmp_path, "--top-k", "1")
    plan = body["plans"][0]
    out = tmp_path / "launch.sbatch"
    written = runner.invoke(cli, ["export", plan["id"], "--format", "slurm", "--out", str(out)])
    assert written.exit_code == 0, written.output
    script = out.read_text()
    assert script.startswith("#!") and out.stat().st_mode & 0o111
    assert "#SBATCH --nodes=1" in script  # the tiny cluster is one node of 4 GPUs
    megatron = runner.invoke(cli, ["export", plan["id"], "--format", "megatron", "--json"])
    assert megatron.exit_code == 0, megatron.output
    args = json.loads(megatron.stdout)["args"]
    par = plan["parallelism"]
    for flag, degree in (
        ("--tensor-model-parallel-size", par["tensor"]),
        ("--pipeline-model-parallel-size", par["pipeline"]),
    ):
        assert args[args.index(flag) + 1] == str(degree)
    assert args[args.index("--micro-batch-size") + 1] == str(plan["micro_batch_size"])
    assert args[args.index("--global-batch-size") + 1] == "8"
    unknown = runner.invoke(cli, ["export", plan["id"], "--format", "nope"])
    assert unknown.exit_code == 2 and "Traceback" not in unknown.output


def test_in_process_startup_failure_is_one_clean_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("MESHPLAN_DATABASE_URL", f"sqlite:///{blocker / 'meshplan.db'}")
    result = runner.invoke(cli, ["searches"])
    assert result.exit_code == 2
    assert "the in-process service failed to start" in result.output
    assert "not-a-directory" in result.output and "Traceback" not in result.output
