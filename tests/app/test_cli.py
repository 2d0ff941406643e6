"""The `meshplan` CLI: --cluster parsing, the in-process search table, clean errors with exit
code 2, and --url mode against a real server (uvicorn in a thread)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import uvicorn
from conftest import TINY_MODEL
from typer.testing import CliRunner

from app.cli import cli, parse_cluster, parse_model
from app.main import create_app

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def test_parse_cluster() -> None:
    assert parse_cluster("h100-sxm:8x8") == {
        "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8, "gpus_per_node": 8}]
    }
    assert parse_cluster("mi300x:2X4")["node_groups"][0]["gpus_per_node"] == 4
    for bad in ("h100-sxm", "h100-sxm:8", "h100-sxm:8x", ":8x8", "h100:0x8", "h100:axb"):
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
    """Table body rows: the cells between the │ separators."""
    return [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines()
            if line.startswith("│")]


def test_search_in_process_prints_a_ranked_table(tmp_path: Path) -> None:
    result = runner.invoke(cli, ["search", "--model", _tiny_file(tmp_path), "--cluster",
                                 "h100-sxm:1x4", "--global-batch", "8", "--seq", "512",
                                 "--top-k", "3"], env=WIDE)
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
    result = runner.invoke(cli, ["search", "--model", _tiny_file(tmp_path), "--cluster",
                                 "h100-sxm:1x4", "--global-batch", "8", "--seq", "512",
                                 "--top-k", "2", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert [p["rank"] for p in body["plans"]] == [1, 2]
    assert body["stats"]["wall_time_s"] >= 0


def test_bad_cluster_syntax_exits_2() -> None:
    result = runner.invoke(cli, ["search", "--model", "llama3-8b", "--cluster", "h100x8",
                                 "--global-batch", "8", "--seq", "512"])
    assert result.exit_code == 2
    assert "ACCELERATOR:NODESxGPUS" in result.output
    assert "Traceback" not in result.output


def test_unknown_preset_exits_2_with_a_clean_message() -> None:
    result = runner.invoke(cli, ["search", "--model", "llama3-9b", "--cluster", "h100-sxm:1x8",
                                 "--global-batch", "8", "--seq", "512"])
    assert result.exit_code == 2
    assert "unknown model preset" in result.output
    assert "Traceback" not in result.output


def test_unknown_accelerator_and_bad_batch_exit_2() -> None:
    result = runner.invoke(cli, ["search", "--model", "llama3-8b", "--cluster", "h999:1x8",
                                 "--global-batch", "8", "--seq", "512"])
    assert result.exit_code == 2 and "cluster.node_groups.0.accelerator" in result.output
    result = runner.invoke(cli, ["search", "--model", "llama3-8b", "--cluster", "h100-sxm:1x8",
                                 "--global-batch", "-8", "--seq", "512"])
    assert result.exit_code == 2 and "global_batch_size" in result.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def server_url(settings_factory: Any) -> Iterator[str]:
    port = _free_port()
    config = uvicorn.Config(create_app(settings_factory()), host="127.0.0.1", port=port,
                            log_level="warning", lifespan="on")
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
    result = runner.invoke(cli, ["search", "--model", _tiny_file(tmp_path), "--cluster",
                                 "h100-sxm:1x4", "--global-batch", "8", "--seq", "512",
                                 "--top-k", "2", "--url", server_url, "--poll", "0.05"],
                           env=WIDE)
    assert result.exit_code == 0, result.output
    assert [r[0] for r in _rows(result.stdout)] == ["1", "2"]
    bad = runner.invoke(cli, ["search", "--model", "llama3-9b", "--cluster", "h100-sxm:1x4",
                              "--global-batch", "8", "--seq", "512", "--url", server_url])
    assert bad.exit_code == 2 and "model.preset" in bad.output


def test_unreachable_service_exits_2() -> None:
    result = runner.invoke(cli, ["search", "--model", "llama3-8b", "--cluster", "h100-sxm:1x8",
                                 "--global-batch", "8", "--seq", "512",
                                 "--url", f"http://127.0.0.1:{_free_port()}"])
    assert result.exit_code == 2 and "cannot reach" in result.output
