"""Exports of a colocated serving plan across node groups: Llama-3-8B on one H100 node ("new")
and one A100 node ("old"), eight 1-GPU replicas on the H100 node and two replicas of tensor 2
× pipeline 2 on the A100 node.

Each group gets its own launch with its own parallelism and replica count; the router (nginx
`least_conn`) lists every replica with a weight proportional to its speed. The expected speed
is computed here from the cost model directly: 1 / (one decode step of one sequence at 1,024
tokens of context) × pipeline stages, the figure `simulate_colocated_mix` routes by (each of
an instance's p schedulers weighs 1 / step). Weights are integers scaled so the fastest is
1000, so each is within 0.5 (rounding) of 1000 · speed / fastest speed.

Where nginx is installed, the generated configuration is checked by `nginx -t` itself, and
the scripts are run with stand-ins for srun / scontrol."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.exports import export_plan
from app.exports import sglang as sg_export
from app.exports import trtllm as tr_export
from app.exports import vllm as vl_export
from app.exports.base import UnexpressiblePlan, parse_flags
from cost_models.serving.base import IterationBatch
from cost_models.serving.registry import build_serving_cost_model
from hardware_catalog.schema import ResolvedCluster
from solver.serving.evaluate import InstanceCosts, ServingProblem
from solver.serving.simulate import routing_weight
from specs.presets import get_preset
from specs.serving import ServingInstance, ServingWorkload

MODEL = get_preset("llama3-8b")
WORKLOAD = {
    "kind": "serving",
    "prompt_tokens": 1024,
    "output_tokens": 256,
    "slo": {"ttft_ms": 1000, "tpot_ms": 50},
}
NEW = {"role": "both", "count": 8, "max_batch_size": 128, "chunk_size": 2048, "group": "new"}
OLD = {
    "role": "both",
    "count": 2,
    "max_batch_size": 64,
    "parallelism": {"tensor": 2, "pipeline": 2},
    "group": "old",
}
NGINX = shutil.which("nginx")


def _cluster(old_nodes: int = 1) -> dict[str, Any]:
    from app.services import planning
    from specs.cluster import ClusterSpec

    spec = ClusterSpec.model_validate(
        {
            "node_groups": [
                {"accelerator": "h100-sxm", "num_nodes": 1, "name": "new"},
                {"accelerator": "a100-80gb", "num_nodes": old_nodes, "name": "old"},
            ]
        }
    )
    return planning.resolve_cluster(spec).model_dump(mode="json")


def _problem(old_nodes: int = 1) -> dict[str, Any]:
    return {
        "model": MODEL.model_dump(mode="json"),
        "cluster": _cluster(old_nodes),
        "workload": WORKLOAD,
    }


def _row(*instances: dict[str, Any], mode: str = "colocated") -> dict[str, Any]:
    return {"id": "mixplan1", "plan": {"mode": mode, "instances": list(instances)}}


def _expected_weights() -> dict[str, float]:
    """Each group's replica weight before rounding, 1000 · speed / fastest speed, from the
    cost model's decode step (module docstring)."""
    problem = _problem()
    serving = ServingProblem(
        MODEL,
        ResolvedCluster.model_validate(problem["cluster"]),
        ServingWorkload.model_validate(WORKLOAD),
    )
    costs = InstanceCosts(serving, build_serving_cost_model("analytical"))
    speed = {}
    for raw in (NEW, OLD):
        inst = ServingInstance.model_validate(raw)
        cost = costs.of(inst)
        step = cost.iteration_time_s(IterationBatch(decode_seqs=1, decode_context_tokens=1024))
        assert routing_weight(cost) == pytest.approx(1 / step)  # what the simulator routes by
        speed[str(inst.group)] = inst.parallelism.pipeline / step
    top = max(speed.values())
    exact = {g: 1000 * s / top for g, s in speed.items()}
    # the two kinds must differ, or the weights would check nothing
    assert abs(exact["new"] - exact["old"]) > 50
    return exact


SERVER = re.compile(r"server (.+?) weight=(\d+);  # group (\S+), replica (\d+)")


def _servers(text: str) -> list[tuple[str, int, str, int]]:
    return [(a, int(w), g, int(r)) for a, w, g, r in SERVER.findall(text)]


def _check_weights(servers: list[tuple[str, int, str, int]], expected: dict[str, float]) -> None:
    assert [(g, r) for _, _, g, r in servers] == [("new", r) for r in range(8)] + [
        ("old", 0),
        ("old", 1),
    ]
    for _, weight, group, _ in servers:
        assert abs(weight - expected[group]) <= 0.5  # integer rounding


def _nginx_test(conf: str, tmp: Path) -> None:
    """`nginx -t` on `conf` (prefix `tmp`, no root needed)."""
    assert NGINX is not None
    (tmp / "nginx.conf").write_text(conf)
    done = subprocess.run(
        [NGINX, "-t", "-p", f"{tmp}/", "-c", "nginx.conf", "-g", "pid nginx.pid;"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "test is successful" in done.stderr


@pytest.mark.parametrize(
    ("fmt", "module", "keys"),
    [
        (
            "vllm",
            vl_export,
            ("--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs"),
        ),
        ("sglang", sg_export, ("--tp-size", "--pp-size", "--max-running-requests")),
        ("trtllm", tr_export, ("--tp_size", "--pp_size", "--max_batch_size")),
    ],
)
def test_engine_scripts_launch_each_group_behind_a_weighted_router(
    fmt: str, module: Any, keys: tuple[str, str, str], tmp_path: Path
) -> None:
    result = export_plan(_row(NEW, OLD), _problem(), fmt)
    assert result.groups is not None and list(result.groups) == ["new", "old"]
    assert result.args == result.groups["new"]
    switches = getattr(module, "SWITCHES", frozenset())
    for group, want in (("new", ("1", "1", "128")), ("old", ("2", "2", "64"))):
        flags = parse_flags(result.groups[group], switches)
        assert tuple(flags[k] for k in keys) == want, (fmt, group)
        assert flags["--port"] == "${PORT}"
    if fmt == "vllm":  # each group's own limits: chunked prefill on new only
        assert "--enable-chunked-prefill" in result.groups["new"]
        assert "--no-enable-chunked-prefill" in result.groups["old"]
    # the script marks each group with its replicas, GPUs and nodes
    assert "group new: 8 replica(s) of 1 GPU(s)" in result.content
    assert "group old: 2 replica(s) of 4 GPU(s)" in result.content
    assert "8 × a100-80gb" in result.content
    expected = _expected_weights()
    servers = _servers(result.content)
    _check_weights(servers, expected)
    assert servers[0][0] == "${G0_R0:?host:port of replica 0 of group 0}"
    assert any("router weight" in n for n in result.notes)
    assert any("instance_speed" in n for n in result.notes)
    script = tmp_path / result.filename
    script.write_text(result.content)
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    # no argument: usage, exit 2
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "new|old|router" in done.stderr
    # the router without the replicas' addresses stops and names the missing one
    work = tmp_path / "run"
    work.mkdir()
    env = {"PATH": os.environ["PATH"]}
    done = subprocess.run(
        ["bash", str(script), "router"], cwd=work, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0 and "G0_R0" in done.stderr
    if NGINX is None:
        return
    # with them, the router's nginx (run as `nginx -t`) accepts the configuration it wrote
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nginx").write_text(f'#!/bin/sh\nexec {NGINX} -t "$@"\n')
    (bin_dir / "nginx").chmod(0o755)
    addresses = {f"G0_R{r}": f"127.0.0.1:{8000 + r}" for r in range(8)}
    addresses |= {f"G1_R{r}": f"127.0.0.2:{8000 + r}" for r in range(2)}
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", **addresses}
    done = subprocess.run(
        ["bash", str(script), "router"], cwd=work, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "test is successful" in done.stderr
    written = (work / "meshplan-router" / "nginx.conf").read_text()
    assert [a for a, *_ in _servers(written)] == list(addresses.values())


def test_slurm_is_one_heterogeneous_component_per_group(tmp_path: Path) -> None:
    result = export_plan(_row(NEW, OLD), _problem(), "slurm")
    lines = result.content.splitlines()
    assert lines.count("#SBATCH hetjob") == 1
    # component 0: the H100 node (8 × 1 GPU), component 1: the A100 node (2 × 4 GPUs)
    assert [x for x in lines if x.startswith("#SBATCH --nodes=")] == ["#SBATCH --nodes=1"] * 2
    assert lines[lines.index("#SBATCH hetjob") - 1].startswith("# component 0: group new")
    assert lines[lines.index("#SBATCH hetjob") + 1].startswith("# component 1: group old")
    assert result.groups is not None and list(result.groups) == ["new", "old"]
    tp = [
        parse_flags(result.groups[g], vl_export.SWITCHES)["--tensor-parallel-size"]
        for g in ("new", "old")
    ]
    assert tp == ["1", "2"]
    expected = _expected_weights()
    servers = _servers(result.content)
    _check_weights(servers, expected)
    assert [a for a, *_ in servers] == [f"${{NODES_0[0]}}:{8000 + r}" for r in range(8)] + [
        f"${{NODES_1[0]}}:{8000 + r}" for r in range(2)
    ]
    script = tmp_path / "meshplan.sbatch"
    script.write_text(result.content)
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    # run it with stand-ins: scontrol names each component's node, srun logs its steps
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "srun.log"
    (bin_dir / "scontrol").write_text('#!/bin/sh\necho "$3"\n')
    (bin_dir / "srun").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    nginx = f'exec {NGINX} -t "$@" 2> {tmp_path}/nginx.err' if NGINX else "exit 0"
    (bin_dir / "nginx").write_text(f"#!/bin/sh\n{nginx}\n")
    for tool in ("scontrol", "srun", "nginx"):
        (bin_dir / tool).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST_HET_GROUP_0": "127.0.0.1",
        "SLURM_JOB_NODELIST_HET_GROUP_1": "127.0.0.2",
    }
    done = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    steps = log.read_text().splitlines()
    assert len(steps) == 10
    new = [s for s in steps if s.startswith("--het-group=0 ")]
    old = [s for s in steps if s.startswith("--het-group=1 ")]
    assert len(new) == 8 and all("--nodelist=127.0.0.1 --gpus-per-task=1 " in s for s in new)
    assert len(old) == 2 and all("--nodelist=127.0.0.2 --gpus-per-task=4 " in s for s in old)
    assert all(s.endswith("bash serve_g1.sh") for s in old)
    assert "--tensor-parallel-size 2" in (tmp_path / "serve_g1.sh").read_text().replace(
        " \\\n  ", " "
    )
    written = _servers((tmp_path / "meshplan-router" / "nginx.conf").read_text())
    assert written[0][0] == "127.0.0.1:8000" and written[-1][0] == "127.0.0.2:8001"
    if NGINX:
        assert "test is successful" in (tmp_path / "nginx.err").read_text()


def test_kubernetes_is_a_deployment_per_group_and_a_router(tmp_path: Path) -> None:
    result = export_plan(_row(NEW, OLD), _problem(), "kubernetes")
    docs = list(yaml.safe_load_all(result.content))
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    expected = _expected_weights()
    for i, group, replicas, gpus, tp in ((0, "new", 8, 1, "1"), (1, "old", 2, 4, "2")):
        deployment = by_name[("Deployment", f"meshplan-mixplan1-g{i}")]
        assert deployment["spec"]["replicas"] == replicas
        pod = deployment["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"meshplan.dev/node-group": group}
        (container,) = pod["containers"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": gpus}
        flags = parse_flags(container["command"][2:], vl_export.SWITCHES)
        assert flags["--tensor-parallel-size"] == tp
        assert ("Service", f"meshplan-mixplan1-g{i}") in by_name
    conf = by_name[("ConfigMap", "meshplan-mixplan1-router-config")]["data"]["nginx.conf"]
    # one server per group's Service, weighing its replicas together: count × replica weight
    servers = re.findall(r"server (\S+) weight=(\d+);  # group (\S+):", conf)
    assert [(a, g) for a, _, g in servers] == [
        ("meshplan-mixplan1-g0:8000", "new"),
        ("meshplan-mixplan1-g1:8000", "old"),
    ]
    for (_, weight, group), count in zip(servers, (8, 2), strict=True):
        assert abs(int(weight) - count * expected[group]) <= count * 0.5  # rounding, × count
    router = by_name[("Deployment", "meshplan-mixplan1-router")]["spec"]["template"]["spec"]
    assert router["containers"][0]["image"] == "nginx:stable"
    assert router["containers"][0]["volumeMounts"][0]["mountPath"] == "/etc/nginx/nginx.conf"
    assert by_name[("Service", "meshplan-mixplan1-router")]["spec"]["ports"][0]["port"] == 8080
    if NGINX:
        _nginx_test(re.sub(r"meshplan-mixplan1-g\d", "127.0.0.1", conf), tmp_path)


def _refused(
    row: dict[str, Any], fmt: str, problem: dict[str, Any] | None = None
) -> UnexpressiblePlan:
    with pytest.raises(UnexpressiblePlan) as info:
        export_plan(row, problem or _problem(), fmt)
    assert info.value.status == 422
    return info.value


@pytest.mark.parametrize("fmt", ["vllm", "sglang", "trtllm", "slurm", "kubernetes"])
def test_what_stays_refused_across_groups_names_its_rule(fmt: str) -> None:
    prefill = {"role": "prefill", "count": 1, "group": "new"}
    decode = {"role": "decode", "count": 1, "group": "old"}
    info = _refused(_row(prefill, decode, mode="disaggregated"), fmt)
    assert info.rule == "serving-across-groups.disaggregated"
    assert "KV-cache transfers between groups" in str(info)
    # an A100 instance of 16 GPUs spans both nodes of its group
    wide = {**OLD, "count": 1, "parallelism": {"tensor": 8, "pipeline": 2}}
    info = _refused(_row(NEW, wide), fmt, _problem(old_nodes=2))
    assert info.rule == "serving-across-groups.multi-node"
    assert "spans 2 nodes" in str(info) and "not generated" in str(info)
    info = _refused(_row(NEW, {**OLD, "group": "nope"}), fmt)
    assert info.rule == "serving-across-groups.group" and "'nope'" in str(info)
    info = _refused(_row(NEW, {**OLD, "count": 3}), fmt)  # 3 × 4 GPUs on one 8-GPU node
    assert info.rule == "world-size"


def test_one_group_of_a_mixed_cluster_exports_as_that_group_alone() -> None:
    from app.services import planning
    from specs.cluster import ClusterSpec

    alone = planning.resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "a100-80gb", "num_nodes": 1, "name": "old"}]}
        )
    ).model_dump(mode="json")
    for fmt in ("vllm", "sglang", "slurm", "kubernetes"):
        mixed = export_plan(_row(OLD), _problem(), fmt).to_dict()
        single = export_plan(
            _row({**OLD, "group": None}), {**_problem(), "cluster": alone}, fmt
        ).to_dict()
        assert "groups" not in mixed
        # the same launch, pinned to the group's nodes: a note says which, Kubernetes
        # selects them by label and Slurm says where its partition or constraint goes
        *notes, pinned = mixed.pop("notes")
        assert notes == single.pop("notes"), fmt
        assert pinned.startswith("the plan runs on node group old alone (1 nodes of 8")
        content, other = mixed.pop("content"), single.pop("content")
        assert mixed == single, fmt
        if fmt == "kubernetes":
            docs = [d for d in yaml.safe_load_all(content) if d["kind"] == "Deployment"]
            assert docs[0]["spec"]["template"]["spec"]["nodeSelector"] == {
                "meshplan.dev/node-group": "old"
            }
        elif fmt == "slurm":
            extra = [line for line in content.splitlines() if line not in other.splitlines()]
            assert extra == [
                "# node group old of a mixed cluster: add the --partition or --constraint that "
                "selects its nodes"
            ]
        else:
            assert content == other, fmt
