"""Plan exports end to end (issue 6, "Done when"): the best plans of real searches for
Llama-3-70B and Mixtral-8x22B on 64 H100s and of a Llama-3.1-70B serving search on 8 H100s
render in every format that can express them; every file parses with a standard parser
(shlex, tomllib, json, yaml), the rule checkers accept it, and the arguments parsed back
reproduce the plan's degrees exactly. The HTTP route answers the API.md body, a 404 for an
unknown plan and 422 problems naming the rule or listing the formats."""

from __future__ import annotations

import json
import shlex
import tomllib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from app_support import assert_problem

from app.exports import FORMATS, export_plan
from app.exports import deepspeed as ds_export
from app.exports import megatron as mg_export
from app.exports import sglang as sg_export
from app.exports import torchtitan as tt_export
from app.exports import vllm as vl_export
from app.exports.base import UnexpressiblePlan, parse_flags

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

H100_64 = {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8, "gpus_per_node": 8}]}
H100_8 = {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}]}
TRAIN = {"kind": "training", "global_batch_size": 1024, "sequence_length": 4096}
TRAINING_FORMATS = ("megatron", "torchtitan", "deepspeed", "slurm", "kubernetes")


def _search(body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run a search the way the worker does; the stored problem and plan rows."""
    from app.core.config import Settings
    from app.schemas import SearchCreate
    from app.services import planning

    settings = Settings(database_url="sqlite://")
    prepared = planning.prepare_search(SearchCreate.model_validate(body), settings)
    outcome = planning.run_problem(
        prepared.problem, progress=lambda _a, _b: None, should_stop=lambda: False
    )
    rows = [{"id": f"plan-{i}", **p} for i, p in enumerate(outcome.plans)]
    return prepared.problem, rows


@pytest.fixture(scope="module")
def searches() -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Best plans for each launcher's framework: Megatron-Core (the default), torchtitan,
    and DeepSpeed constrained to shapes a DeepSpeed config expresses (no tensor × pipeline,
    no context parallelism, no interleaving)."""
    out = {}
    for key, model, fixed in (
        ("llama", "llama3-70b", {}),
        ("mixtral", "mixtral-8x22b", {}),
        ("llama-tt", "llama3-70b", {"framework": "torchtitan"}),
        ("mixtral-tt", "mixtral-8x22b", {"framework": "torchtitan"}),
        ("llama-ds", "llama3-70b", {"pipeline": 1, "framework": "deepspeed"}),
        (
            "mixtral-ds",
            "mixtral-8x22b",
            {"context": 1, "tensor": 1, "virtual_pipeline": 1, "framework": "deepspeed"},
        ),
    ):
        out[key] = _search(
            {
                "model": {"preset": model},
                "cluster": H100_64,
                "workload": TRAIN,
                "top_k": 3,
                "constraints": {"fixed": fixed, "time_limit_s": 60},
            }
        )
    out["serving"] = _search(
        {
            "model": {"preset": "llama3.1-70b"},
            "cluster": H100_8,
            "workload": {
                "kind": "serving",
                "prompt_tokens": 1024,
                "output_tokens": 256,
                "slo": {"ttft_ms": 1000, "tpot_ms": 50},
                "num_requests": 50,
            },
            "top_k": 3,
            # colocated plans (the exports of disaggregated ones are tested on a given plan)
            "constraints": {"time_limit_s": 30, "fixed": {"mode": "colocated"}},
        }
    )
    return out


def shell_words(text: str) -> list[str]:
    """A script's words as the shell reads them: backslash-newline continues the line
    (POSIX shell), `#` starts a comment."""
    return shlex.split(text.replace("\\\n", " "), comments=True)


def _best(searches: dict[str, Any], key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    problem, rows = searches[key]
    return problem, rows[0]


def _degrees_from_megatron(args: list[str]) -> dict[str, Any]:
    f = parse_flags(args, mg_export.SWITCHES)
    tp = int(f["--tensor-model-parallel-size"])
    pp = int(f["--pipeline-model-parallel-size"])
    cp = int(f["--context-parallel-size"])
    return {
        "tensor": tp,
        "pipeline": pp,
        "context": cp,
        "expert": int(f.get("--expert-model-parallel-size", 1)),
        "expert_tensor": int(f.get("--expert-tensor-parallel-size", tp)),
        "sequence_parallel": bool(f.get("--sequence-parallel")),
        "micro_batch_size": int(f["--micro-batch-size"]),
        "global_batch_size": int(f["--global-batch-size"]),
    }


def megatron_stage_layers(args: list[str]) -> list[int]:
    """Layers per chunk (chunk c on rank c mod pp) as Megatron builds them from the flags:
    the layout's decoder layers per stage; or first/last-stage counts with the rest split
    evenly over the middle ranks, each rank's layers split evenly over its virtual stages;
    or an even split (Megatron's `get_num_layers_to_build`)."""
    f = parse_flags(args, mg_export.SWITCHES)
    layers = int(f["--num-layers"])
    pp = int(f["--pipeline-model-parallel-size"])
    if "--pipeline-model-parallel-layout" in f:
        return [
            s.count("t") for s in mg_export.parse_layout(str(f["--pipeline-model-parallel-layout"]))
        ]
    if "--num-layers-per-virtual-pipeline-stage" in f:
        n = int(f["--num-layers-per-virtual-pipeline-stage"])
        return [n] * (layers // n)
    vpp = int(f.get("--num-virtual-stages-per-pipeline-rank", 1))
    if "--decoder-first-pipeline-num-layers" in f:
        first = int(f["--decoder-first-pipeline-num-layers"])
        last = int(f["--decoder-last-pipeline-num-layers"])
        middle = (layers - first - last) // (pp - 2) if pp > 2 else 0
        per_rank = [first] + [middle] * (pp - 2) + [last]
        return [per_rank[c % pp] // vpp for c in range(pp * vpp)]
    return [layers // (pp * vpp)] * (pp * vpp)


# ---- training plans ----------------------------------------------------------------------
@pytest.mark.parametrize("key", ["llama", "mixtral"])
def test_megatron_args_reproduce_the_plan(searches: dict[str, Any], key: str) -> None:
    problem, row = _best(searches, key)
    plan = row["plan"]
    result = export_plan(row, problem, "megatron")
    assert result.format == "megatron" and result.filename == "launch_megatron.sh"
    par = plan["parallelism"]
    back = _degrees_from_megatron(result.args)
    if not problem["model"]["moe"]:  # a dense model has no expert grid (Megatron: etp = tp)
        back["expert_tensor"] = par["expert_tensor"]
    assert back == {
        "tensor": par["tensor"],
        "pipeline": par["pipeline"],
        "context": par["context"],
        "expert": par["expert"],
        "expert_tensor": par["expert_tensor"],
        "sequence_parallel": par["sequence_parallel"],
        "micro_batch_size": plan["micro_batch_size"],
        "global_batch_size": TRAIN["global_batch_size"],
    }
    if par["pipeline"] > 1:
        assert megatron_stage_layers(result.args) == plan["stage_layers"]
    flags = parse_flags(result.args, mg_export.SWITCHES)
    assert flags["--seq-length"] == "4096"
    assert int(flags["--num-layers"]) == problem["model"]["num_layers"]
    assert int(flags["--num-query-groups"]) == problem["model"]["num_kv_heads"]
    zero = plan["zero_stage"]
    assert ("--use-distributed-optimizer" in flags) == (zero == 1)
    assert ("--use-torch-fsdp2" in flags) == (zero >= 2)
    if problem["model"]["moe"]:
        assert flags["--num-experts"] == "8" and flags["--moe-router-topk"] == "2"
    # the rule checker accepts it, and the script is valid shell words
    world = par["data"] * par["tensor"] * par["pipeline"] * par["context"]
    assert world == 64
    mg_export.check_args(result.args, world_size=world, env=result.env)
    words = shell_words(result.content)
    assert words[words.index("pretrain_gpt.py") + 1 :] == result.args
    assert result.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == ("1" if zero < 2 else None)


@pytest.mark.parametrize("key", ["llama-tt", "mixtral-tt"])
def test_torchtitan_toml_reproduces_the_plan(searches: dict[str, Any], key: str) -> None:
    problem, row = _best(searches, key)
    plan, par = row["plan"], row["plan"]["parallelism"]
    result = export_plan(row, problem, "torchtitan")
    cfg = tomllib.loads(result.content)
    p = cfg["parallelism"]
    assert p["data_parallel_replicate_degree"] * p["data_parallel_shard_degree"] == par["data"]
    assert (
        p["tensor_parallel_degree"],
        p["pipeline_parallel_degree"],
        p["context_parallel_degree"],
        p["expert_parallel_degree"],
    ) == (par["tensor"], par["pipeline"], par["context"], par["expert"])
    # ZeRO-1/2/3 are FSDP (dp_shard), ZeRO-0 DDP (dp_replicate)
    assert p["data_parallel_shard_degree"] == (par["data"] if plan["zero_stage"] else 1)
    tr = cfg["training"]
    assert tr["global_batch_size"] == 1024 and tr["seq_len"] == 4096
    if par["pipeline"] > 1:
        assert p["pipeline_parallel_microbatch_size"] == plan["micro_batch_size"]
        assert tr["local_batch_size"] == 1024 // par["data"]
        parts = p["module_fqns_per_model_part"]
        assert [sum(m.startswith("layers.") for m in part) for part in parts] == plan[
            "stage_layers"
        ]
        # torchtitan's schedule class names (torchtitan/distributed/pipeline_parallel.py)
        titan_names = {
            "gpipe": "GPipe",
            "1f1b": "1F1B",
            "interleaved_1f1b": "Interleaved1F1B",
            "zero_bubble_v": "ZBVZeroBubble",
            "dualpipe_v": "DualPipeV",
        }
        assert p["pipeline_parallel_schedule"] == titan_names[plan["pipeline_schedule"]]
    else:
        assert tr["local_batch_size"] == plan["micro_batch_size"]
    assert cfg["activation_checkpoint"]["mode"] == plan["recompute"]
    tt_export.check_config(cfg, world_size=64, num_layers=problem["model"]["num_layers"])


def test_a_launcher_refuses_plans_priced_for_another_framework(
    searches: dict[str, Any],
) -> None:
    """A plan is priced for one framework (its overlaps, rules and memory): exported to a
    launcher of another, it is refused naming the rule; a wrapper launches the plan's own
    framework unless told otherwise, and refuses a mismatch."""
    problem, row = _best(searches, "llama")
    assert row["plan"]["framework"] == "megatron_core"
    for fmt, rule in (("deepspeed", "deepspeed.framework"), ("torchtitan", "torchtitan.framework")):
        with pytest.raises(UnexpressiblePlan) as info:
            export_plan(row, problem, fmt)
        assert info.value.rule == rule and info.value.status == 422
        assert "megatron_core" in str(info.value)
    with pytest.raises(UnexpressiblePlan) as info:
        export_plan(row, problem, "slurm", {"framework": "deepspeed"})
    assert info.value.rule == "deepspeed.framework"
    tt_problem, tt_row = _best(searches, "llama-tt")
    slurm = export_plan(tt_row, tt_problem, "slurm")  # torchtitan's own launcher by default
    assert "framework: torchtitan" in slurm.notes


@pytest.mark.parametrize("key", ["llama-ds", "mixtral-ds"])
def test_deepspeed_json_reproduces_the_plan(searches: dict[str, Any], key: str) -> None:
    problem, row = _best(searches, key)
    plan, par = row["plan"], row["plan"]["parallelism"]
    result = export_plan(row, problem, "deepspeed")
    cfg = json.loads(result.content)
    dp = par["data"]
    assert cfg["train_batch_size"] == 1024
    assert cfg["train_micro_batch_size_per_gpu"] == plan["micro_batch_size"]
    assert cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp == 1024
    assert cfg["zero_optimization"]["stage"] == plan["zero_stage"]
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "none"}
    assert cfg["bf16"] == {"enabled": True} and cfg["fp16"] == {"enabled": False}
    assert cfg.get("tensor_parallel", {}).get("autotp_size", 1) == par["tensor"]
    assert cfg.get("pipeline", {}).get("stages", 1) == par["pipeline"]
    if par["expert"] > 1:
        assert cfg["expert_parallel"]["autoep_size"] == par["expert"]
    ds_export.check_config(cfg, world_size=64)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed"])
def test_slurm_wraps_the_framework_command(searches: dict[str, Any], framework: str) -> None:
    key = {"megatron": "llama", "torchtitan": "llama-tt", "deepspeed": "llama-ds"}[framework]
    problem, row = _best(searches, key)
    result = export_plan(row, problem, "slurm", {"framework": framework})
    text = result.content
    assert text.startswith("#!/bin/bash\n")
    assert "#SBATCH --nodes=8" in text and "#SBATCH --gpus-per-node=8" in text
    assert "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --exclusive" in text
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    words = shell_words(text)
    srun = words.index("srun")
    assert words[srun:] == result.args
    torchrun = result.args.index("torchrun")
    tr = parse_flags(result.args[torchrun + 1 :], ())
    assert (tr["--nnodes"], tr["--nproc-per-node"], tr["--rdzv-backend"]) == ("8", "8", "c10d")
    assert tr["--rdzv-endpoint"] == "${MASTER_ADDR}:${MASTER_PORT}"
    if framework == "megatron":
        inner = export_plan(row, problem, "megatron")
        entry = result.args.index("pretrain_gpt.py")
        assert result.args[entry + 1 :] == inner.args
    else:
        inner = export_plan(row, problem, framework)
        # the config file is written verbatim by a heredoc before the launch
        body = text.split(f"cat > {inner.filename} <<'MESHPLAN_EOF'\n", 1)[1]
        assert body.split("\nMESHPLAN_EOF\n", 1)[0] == inner.content.rstrip("\n")


@pytest.mark.parametrize("key", ["llama", "mixtral"])
@pytest.mark.parametrize("kind", ["pytorchjob", "jobset"])
def test_kubernetes_training_manifests(searches: dict[str, Any], key: str, kind: str) -> None:
    problem, row = _best(searches, key)
    result = export_plan(row, problem, "kubernetes", {"kind": kind})
    docs = list(yaml.safe_load_all(result.content))
    job = docs[-1]
    if kind == "pytorchjob":
        assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
        specs = job["spec"]["pytorchReplicaSpecs"]
        assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 7
        pod = specs["Worker"]["template"]["spec"]
    else:
        assert (job["apiVersion"], job["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
        rj = job["spec"]["replicatedJobs"][0]["template"]["spec"]
        assert rj["parallelism"] == rj["completions"] == 8
        assert rj["completionMode"] == "Indexed"
        pod = rj["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert container["command"] == result.args
    inner = export_plan(row, problem, "megatron")
    entry = container["command"].index("pretrain_gpt.py")
    assert container["command"][entry + 1 :] == inner.args
    assert {"name": "CUDA_DEVICE_MAX_CONNECTIONS", "value": "1"} in container["env"]


def test_kubernetes_torchtitan_config_map(searches: dict[str, Any]) -> None:
    problem, row = _best(searches, "mixtral-tt")
    result = export_plan(row, problem, "kubernetes", {"framework": "torchtitan"})
    config_map, job = yaml.safe_load_all(result.content)
    toml_text = config_map["data"]["train.toml"]
    assert toml_text == export_plan(row, problem, "torchtitan").content
    assert tomllib.loads(toml_text)["parallelism"]["expert_parallel_degree"] == 8
    volumes = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"]
    assert {"name": "config", "configMap": {"name": config_map["metadata"]["name"]}} in volumes


# ---- serving plans -----------------------------------------------------------------------
def test_serving_plan_yields_vllm_sglang_slurm_kubernetes(searches: dict[str, Any]) -> None:
    problem, row = _best(searches, "serving")
    inst = row["plan"]["instances"][0]
    par = inst["parallelism"]
    vl = export_plan(row, problem, "vllm")
    assert vl.args[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-70B"]
    f = parse_flags(vl.args[3:], vl_export.SWITCHES)
    assert (int(f["--tensor-parallel-size"]), int(f["--pipeline-parallel-size"])) == (
        par["tensor"],
        par["pipeline"],
    )
    assert int(f["--max-num-seqs"]) == inst["max_batch_size"]
    if inst["chunk_size"] is not None:
        assert f["--enable-chunked-prefill"] is True
        assert int(f["--max-num-batched-tokens"]) == max(inst["chunk_size"], inst["max_batch_size"])
    assert int(f["--max-model-len"]) == 1280  # 1024 + 256 tokens, a multiple of 256
    words = shell_words(vl.content)
    start = words.index("vllm")
    assert words[start : start + len(vl.args)] == vl.args
    vl_export.check_args(vl.args[2:], _model(problem))

    # the search priced the plan for vLLM (its default engine): SGLang's export refuses it,
    # naming the rule and the search that gives an SGLang plan; the same layout priced for
    # SGLang exports
    assert row["plan"]["engine"] == "vllm"
    with pytest.raises(UnexpressiblePlan) as refused:
        export_plan(row, problem, "sglang")
    assert refused.value.rule == "sglang.engine"
    assert "constraints.fixed.engine = 'sglang'" in str(refused.value)
    sglang_row = {**row, "plan": {**row["plan"], "engine": "sglang"}}
    sg = export_plan(sglang_row, problem, "sglang")
    g = parse_flags(sg.args[3:], sg_export.SWITCHES)
    assert int(g["--tp-size"]) == par["tensor"] * par["expert"]
    assert int(g["--pp-size"]) == par["pipeline"]
    assert int(g["--max-running-requests"]) == inst["max_batch_size"]
    sg_export.check_args(sg.args[3:], _model(problem))

    sl = export_plan(row, problem, "slurm")
    gpus = inst["count"] * par["tensor"] * par["pipeline"] * par["expert"]
    assert f"#SBATCH --nodes={-(-gpus // 8)}" in sl.content
    words = shell_words(sl.content)
    assert words.count("srun") == inst["count"]
    assert sl.args[sl.args.index("--port") + 1] == "${PORT}"

    k8 = export_plan(row, problem, "kubernetes")
    deployment, service = yaml.safe_load_all(k8.content)
    assert deployment["kind"] == "Deployment" and deployment["spec"]["replicas"] == inst["count"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus // inst["count"]
    assert container["command"][:3] == ["vllm", "serve", "meta-llama/Llama-3.1-70B"]
    assert service["kind"] == "Service"


def test_tensorrt_llm_plans_launch_with_trtllm_serve_alone_and_wrapped(
    searches: dict[str, Any],
) -> None:
    """A plan priced for TensorRT-LLM exports as `trtllm-serve` with its options file, and
    slurm / kubernetes wrap that command without `?framework=` (the plan's own launcher)."""
    problem, row = _best(searches, "serving")
    inst = row["plan"]["instances"][0]
    par = inst["parallelism"]
    options = {"enable_chunked_prefill": True, "disable_overlap_scheduler": True}
    trt_row = {
        **row,
        "plan": {**row["plan"], "engine": "tensorrt_llm", "engine_options": options},
    }
    with pytest.raises(UnexpressiblePlan) as refused:
        export_plan(trt_row, problem, "vllm")
    assert refused.value.rule == "vllm.engine"
    alone = export_plan(trt_row, problem, "trtllm")
    assert alone.args[:2] == ["trtllm-serve", "meta-llama/Llama-3.1-70B"]
    flags = dict(zip(alone.args[2::2], alone.args[3::2], strict=False))
    assert int(flags["--tp_size"]) == par["tensor"] * par["expert"]
    assert int(flags["--max_batch_size"]) == inst["max_batch_size"]
    script_options = alone.content.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    parsed = yaml.safe_load(script_options)
    assert parsed["enable_chunked_prefill"] is True
    assert parsed["disable_overlap_scheduler"] is True
    assert parsed["kv_cache_config"]["enable_block_reuse"] is True

    sl = export_plan(trt_row, problem, "slurm")
    assert sl.args[0] == "trtllm-serve" and "framework: trtllm" in sl.notes
    words = shell_words(sl.content)
    assert words.count("srun") == inst["count"]
    block = sl.content.split("<<'OPTIONS'\n", 1)[1].split("\nOPTIONS", 1)[0]
    assert yaml.safe_load(block) == parsed

    k8 = export_plan(trt_row, problem, "kubernetes")
    config_map, deployment, service = yaml.safe_load_all(k8.content)
    assert config_map["kind"] == "ConfigMap"
    assert yaml.safe_load(config_map["data"]["extra_llm_api_options.yaml"]) == parsed
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    path = container["command"][container["command"].index("--extra_llm_api_options") + 1]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert path == mount["mountPath"] + "/extra_llm_api_options.yaml"
    assert {"name": "config", "configMap": {"name": config_map["metadata"]["name"]}} in pod[
        "volumes"
    ]
    assert container["ports"][0]["containerPort"] == service["spec"]["ports"][0]["port"] == 8000
    # a vLLM plan still goes to vLLM when wrapped
    assert export_plan(row, problem, "kubernetes").args[0] == "vllm"


def _model(problem: dict[str, Any]) -> Any:
    from specs.model import ModelSpec

    return ModelSpec.model_validate(problem["model"])


def _disaggregated_problem() -> tuple[dict[str, Any], dict[str, Any]]:
    """Mixtral-8x22B on 4 nodes of 8 H100s: one 8-GPU prefill instance and a 16-GPU decode
    instance (tensor 8, expert 2) spanning two nodes."""
    from app.services import planning
    from specs.cluster import ClusterSpec
    from specs.presets import get_preset

    cluster = planning.resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 4, "gpus_per_node": 8}]}
        )
    )
    problem = {
        "model": get_preset("mixtral-8x22b").model_dump(mode="json"),
        "cluster": cluster.model_dump(mode="json"),
        "workload": {
            "kind": "serving",
            "prompt_tokens": 2048,
            "output_tokens": 512,
            "slo": {"ttft_ms": 2000, "tpot_ms": 60},
            "precision": "fp8",
        },
    }
    plan = {
        "id": "disagg-1",
        "plan": {
            "mode": "disaggregated",
            "instances": [
                {
                    "role": "decode",
                    "count": 1,
                    "parallelism": {"tensor": 8, "pipeline": 1, "expert": 2},
                    "max_batch_size": 256,
                },
                {
                    "role": "prefill",
                    "count": 1,
                    "parallelism": {"tensor": 8, "pipeline": 1, "expert": 1},
                    "max_batch_size": 16,
                    "chunk_size": 8192,
                },
            ],
        },
    }
    return problem, plan


def test_disaggregated_roles_for_vllm_and_sglang() -> None:
    problem, row = _disaggregated_problem()
    vl = export_plan(row, problem, "vllm")
    assert vl.roles is not None and set(vl.roles) == {"prefill", "decode"}
    assert vl.args == vl.roles["prefill"]
    kv = {
        role: json.loads(str(parse_flags(args, vl_export.SWITCHES)["--kv-transfer-config"]))
        for role, args in vl.roles.items()
    }
    assert kv["prefill"]["kv_role"] == "kv_producer" and kv["decode"]["kv_role"] == "kv_consumer"
    decode = parse_flags(vl.roles["decode"], vl_export.SWITCHES)
    assert decode["--data-parallel-size"] == "2" and decode["--enable-expert-parallel"] is True
    assert decode["--distributed-executor-backend"] == "ray"  # 16 GPUs > one 8-GPU node
    assert decode["--quantization"] == "fp8" and decode["--kv-cache-dtype"] == "fp8"

    sg = export_plan(row, problem, "sglang")
    assert sg.roles is not None
    modes = {
        role: parse_flags(args, sg_export.SWITCHES)["--disaggregation-mode"]
        for role, args in sg.roles.items()
    }
    assert modes == {"prefill": "prefill", "decode": "decode"}
    d = parse_flags(sg.roles["decode"], sg_export.SWITCHES)
    assert (d["--tp-size"], d["--dp-size"], d["--ep-size"], d["--nnodes"]) == ("16", "2", "16", "2")
    assert d["--enable-dp-attention"] is True


def test_tensorrt_llm_refuses_disaggregated_and_multi_node_instances() -> None:
    problem, row = _disaggregated_problem()
    trt = {**row, "plan": {**row["plan"], "engine": "tensorrt_llm"}}
    for fmt in ("trtllm", "slurm", "kubernetes"):
        with pytest.raises(UnexpressiblePlan) as info:
            export_plan(trt, problem, fmt)
        assert info.value.rule == "trtllm.disaggregated", fmt
    decode = next(i for i in row["plan"]["instances"] if i["role"] == "decode")
    colocated = {
        **trt,
        "plan": {**trt["plan"], "mode": "colocated", "instances": [{**decode, "role": "both"}]},
    }
    for fmt in ("trtllm", "slurm", "kubernetes"):
        with pytest.raises(UnexpressiblePlan) as info:
            export_plan(colocated, problem, fmt)
        assert info.value.rule == "trtllm.single-node", fmt
        assert "spans 2 nodes" in str(info.value)


def test_disaggregated_kubernetes_uses_a_leader_worker_set_for_the_multi_node_role() -> None:
    problem, row = _disaggregated_problem()
    for framework in ("vllm", "sglang"):
        result = export_plan(row, problem, "kubernetes", {"framework": framework})
        docs = list(yaml.safe_load_all(result.content))
        kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
        assert kinds == [
            ("Deployment", "meshplan-disagg-1-prefill"),
            ("Service", "meshplan-disagg-1-prefill"),
            ("LeaderWorkerSet", "meshplan-disagg-1-decode"),
            ("Service", "meshplan-disagg-1-decode"),
        ]
        lws = docs[2]["spec"]
        assert lws["replicas"] == 1 and lws["leaderWorkerTemplate"]["size"] == 2
        leader = lws["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
        assert leader["resources"]["limits"] == {"nvidia.com/gpu": 8}


def test_disaggregated_slurm_places_each_replica_on_its_nodes() -> None:
    problem, row = _disaggregated_problem()
    result = export_plan(row, problem, "slurm", {"framework": "sglang"})
    assert "#SBATCH --nodes=3" in result.content  # 1 prefill node + 2 decode nodes
    steps = [line for line in result.content.splitlines() if line.startswith("srun ")]
    assert len(steps) == 2
    assert '--nodes=1 --ntasks=1 --ntasks-per-node=1 --nodelist="${NODES[0]}"' in steps[0]
    assert (
        '--nodes=2 --ntasks=2 --ntasks-per-node=1 --nodelist="${NODES[1]},${NODES[2]}"' in steps[1]
    )
    shell_words(result.content)


def test_every_training_format_is_produced_for_both_models(searches: dict[str, Any]) -> None:
    """The issue's acceptance line: for each model every training format renders, each from
    the best plan of the same problem for the framework it launches."""
    for model in ("llama", "mixtral"):
        for fmt in TRAINING_FORMATS:
            key = {"deepspeed": f"{model}-ds", "torchtitan": f"{model}-tt"}.get(fmt, model)
            problem, row = _best(searches, key)
            result = export_plan(row, problem, fmt).to_dict()
            assert set(result) >= {"format", "filename", "content", "args", "env"}
            assert result["format"] == fmt and result["content"] and result["args"]


def test_serving_formats_refuse_training_plans_and_back(searches: dict[str, Any]) -> None:
    problem, row = _best(searches, "llama")
    for fmt in ("vllm", "sglang"):
        with pytest.raises(UnexpressiblePlan) as info:
            export_plan(row, problem, fmt)
        assert info.value.rule == "serving-format-needs-serving-plan"
    sproblem, srow = _best(searches, "serving")
    for fmt in ("megatron", "torchtitan", "deepspeed"):
        with pytest.raises(UnexpressiblePlan) as info:
            export_plan(srow, sproblem, fmt)
        assert info.value.rule == "training-format-needs-training-plan"


# ---- HTTP --------------------------------------------------------------------------------
@pytest.fixture
def export_client(settings_factory: Any) -> Iterator[Any]:
    from app.api.routes import exports
    from app.main import create_app

    app = create_app(settings_factory())
    if not any(getattr(r, "path", "") == "/v1/plans/{plan_id}/export/{format}" for r in app.routes):
        app.include_router(exports.router)
    with TestClient(app) as client:
        yield client


def test_http_export_answers_the_contract(export_client: Any, tiny: dict[str, Any]) -> None:
    search = export_client.post("/v1/searches?wait=30", json=tiny).json()
    assert search["status"] == "succeeded", search
    plan = export_client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]
    response = export_client.get(f"/v1/plans/{plan['id']}/export/megatron")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) >= {"format", "filename", "content", "args", "env"}
    assert body["format"] == "megatron" and body["filename"] == "launch_megatron.sh"
    back = _degrees_from_megatron(body["args"])
    par = plan["parallelism"]
    assert (back["tensor"], back["pipeline"], back["context"]) == (
        par["tensor"],
        par["pipeline"],
        par["context"],
    )
    assert back["micro_batch_size"] == plan["micro_batch_size"]

    assert plan["framework"] == "megatron_core"
    slurm = export_client.get(f"/v1/plans/{plan['id']}/export/slurm")
    assert slurm.status_code == 200, slurm.text
    assert "pretrain_gpt.py" in slurm.json()["content"]
    # The plan was priced for Megatron-Core: torchtitan would run other overlaps and rules.
    other = export_client.get(f"/v1/plans/{plan['id']}/export/slurm?framework=torchtitan")
    problem = assert_problem(other, 422)
    assert problem["rule"] == "torchtitan.framework"

    bad = export_client.get(f"/v1/plans/{plan['id']}/export/vllm")
    problem = assert_problem(bad, 422, path=f"/v1/plans/{plan['id']}/export/vllm")
    assert problem["rule"] == "serving-format-needs-serving-plan"
    assert problem["type"].endswith("/unexpressible-plan")

    unknown = export_client.get(f"/v1/plans/{plan['id']}/export/horovod")
    problem = assert_problem(unknown, 422)
    assert problem["formats"] == list(FORMATS)

    missing = export_client.get("/v1/plans/no-such-plan/export/megatron")
    assert_problem(missing, 404)


def test_the_router_module_is_importable_by_name() -> None:
    import importlib

    module = importlib.import_module("app.api.routes.exports")
    paths = {r.path for r in module.router.routes}
    assert paths == {"/v1/plans/{plan_id}/export/{format}"}
    assert Path(module.__file__ or "").name == "exports.py"
