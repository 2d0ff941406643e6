"""The standalone vLLM script starts every replica of a serving plan, each on its own GPUs
(`CUDA_VISIBLE_DEVICES`) and port, host by host (`HOST_INDEX`): it used to start one
`vllm serve` for N colocated replicas, and a disaggregated plan's instances on the same
GPUs. Run here with a stand-in `vllm` that logs what it was started with."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

SERVING = {
    "kind": "serving",
    "prompt_tokens": 1024,
    "output_tokens": 256,
    "slo": {"ttft_ms": 1000, "tpot_ms": 50},
}


def _script(client: Any, nodes: int, fixed: dict[str, Any]) -> tuple[dict[str, Any], str]:
    body = {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": nodes}]},
        "workload": SERVING,
        "constraints": {"fixed": fixed},
        "top_k": 1,
    }
    search = client.post("/v1/searches?wait=60", json=body).json()
    assert search["status"] == "succeeded", search
    plan = client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]
    export = client.get(f"/v1/plans/{plan['id']}/export/vllm")
    assert export.status_code == 200, export.text
    return plan, export.json()["content"]


def _run(tmp: Path, script: str, host: int) -> tuple[int, list[tuple[str, str]]]:
    """Run the script for `host` with a stand-in vllm: (exit code, [(devices, port)])."""
    bin_dir, log = tmp / "bin", tmp / f"vllm{host}.log"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "vllm"
    fake.write_text(f'#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES $*" >> {log}\n')
    fake.chmod(0o755)
    path = tmp / "serve_vllm.sh"
    path.write_text(script)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOST_INDEX": str(host)}
    done = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True)
    started = []
    for line in log.read_text().splitlines() if log.exists() else []:
        words = line.split()
        started.append((words[0], words[words.index("--port") + 1]))
    return done.returncode, started


def test_colocated_replicas_each_get_their_gpu_and_port_on_each_host(
    client: Any, tmp_path: Path
) -> None:
    plan, script = _script(client, 2, {"mode": "colocated", "tensor": 1, "pipeline": 1})
    (inst,) = plan["instances"]
    assert inst["count"] == 16  # 16 one-GPU replicas on 2 × 8 GPUs
    for host in (0, 1):
        code, started = _run(tmp_path, script, host)
        assert code == 0
        assert sorted(d for d, _ in started) == sorted(str(g) for g in range(8))
        assert sorted(int(p) for _, p in started) == list(range(8000 + 8 * host, 8008 + 8 * host))
    code, started = _run(tmp_path, script, 2)
    assert code == 2 and not started


def test_disaggregated_instances_do_not_share_gpus(client: Any, tmp_path: Path) -> None:
    plan, script = _script(client, 1, {"mode": "disaggregated"})
    code, started = _run(tmp_path, script, 0)
    assert code == 0
    want = sum(i["count"] for i in plan["instances"])
    assert len(started) == want
    gpus = [g for devices, _ in started for g in devices.split(",")]
    assert len(gpus) == len(set(gpus))  # no GPU given to two replicas
    needed = sum(i["count"] * i["parallelism"]["tensor"] * i["parallelism"]["pipeline"]
                 for i in plan["instances"])  # fmt: skip
    assert len(gpus) == needed <= 8
    assert len({p for _, p in started}) == want  # a port each
