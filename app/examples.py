"""Named request examples shown by `/docs` and `/redoc` (OpenAPI `examples` of a request
body): a dense and an MoE training search, a search on a mixed H100 + A100 cluster, a
serving search, and estimates of a training, an MoE and a serving plan. Each is a real
request: `tests/app/test_api_contract.py` posts every one and expects it to succeed."""

from __future__ import annotations

from typing import Any

from fastapi.openapi.models import Example

H100_NODES_8 = {"accelerator": "h100-sxm", "num_nodes": 8, "gpus_per_node": 8}
H100_NODE = {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}
TRAINING_WORKLOAD: dict[str, Any] = {
    "kind": "training",
    "global_batch_size": 1024,
    "sequence_length": 4096,
    "precision": "bf16",
}
SERVING_WORKLOAD: dict[str, Any] = {
    "kind": "serving",
    "prompt_tokens": 1024,
    "output_tokens": 256,
    "arrival_rate_rps": None,
    "slo": {"ttft_ms": 1000, "tpot_ms": 50, "percentile": 90},
    "precision": "bf16",
    "objective": "max_goodput_per_gpu",
}
TRAINING_PLAN: dict[str, Any] = {
    "parallelism": {
        "data": 2,
        "tensor": 8,
        "pipeline": 4,
        "virtual_pipeline": 1,
        "context": 1,
        "expert": 1,
        "expert_tensor": 1,
        "sequence_parallel": True,
    },
    "micro_batch_size": 1,
    "zero_stage": 1,
    "recompute": "selective",
    "pipeline_schedule": "1f1b",
    "stage_layers": [20, 20, 20, 20],
}
SERVING_PLAN: dict[str, Any] = {
    "mode": "colocated",
    "instances": [
        {
            "role": "both",
            "count": 2,
            "parallelism": {"tensor": 4, "pipeline": 1, "expert": 1},
            "max_batch_size": 112,
            "chunk_size": 2048,
        }
    ],
}


def _example(summary: str, description: str, value: dict[str, Any]) -> Example:
    return Example(summary=summary, description=description, value=value)


SEARCH_EXAMPLES: dict[str, Example] = {
    "dense-training": _example(
        "Llama-3-70B training on 64 H100",
        "Ranks data / tensor / pipeline / context degrees, micro-batch, ZeRO stage, "
        "recompute and schedule for 1,024 sequences of 4,096 tokens per step.",
        {
            "model": {"preset": "llama3-70b"},
            "cluster": {"node_groups": [H100_NODES_8]},
            "workload": TRAINING_WORKLOAD,
            "constraints": {"time_limit_s": 30},
            "top_k": 10,
        },
    ),
    "moe-training": _example(
        "Mixtral-8x7B (MoE) training on 16 H100",
        "Expert parallelism and expert-tensor degrees are searched with the dense ones; "
        "plans report the all-to-all time as `expert_parallel_comm`.",
        {
            "model": {"preset": "mixtral-8x7b"},
            "cluster": {"node_groups": [{**H100_NODE, "num_nodes": 2}]},
            "workload": {**TRAINING_WORKLOAD, "global_batch_size": 256},
            "top_k": 5,
        },
    ),
    "mixed-cluster": _example(
        "Llama-3-8B training on 16 H100 plus 8 A100",
        "Node groups of different accelerators: a plan may give whole pipeline stages to "
        "the A100 group (`stage_groups`) with fewer layers on it.",
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {
                "node_groups": [
                    {**H100_NODE, "num_nodes": 2, "name": "h100"},
                    {
                        "accelerator": "a100-80gb",
                        "num_nodes": 1,
                        "gpus_per_node": 8,
                        "name": "a100",
                    },
                ]
            },
            "workload": {**TRAINING_WORKLOAD, "global_batch_size": 256},
            "top_k": 5,
        },
    ),
    "serving": _example(
        "Llama-3-8B serving on 8 H100 under a latency SLO",
        "Ranks instance layouts (tensor / pipeline degrees, batch, chunked prefill, "
        "colocated or disaggregated prefill/decode) by goodput per GPU.",
        {
            "model": {"preset": "llama3-8b"},
            "cluster": {"node_groups": [H100_NODE]},
            "workload": SERVING_WORKLOAD,
            "top_k": 5,
        },
    ),
}
"""Request examples of `POST /v1/searches`."""

ESTIMATE_EXAMPLES: dict[str, Example] = {
    "training": _example(
        "One Llama-3-70B training plan on 64 H100",
        "TP8 × PP4 × DP2 with the distributed optimizer and selective recompute.",
        {
            "model": {"preset": "llama3-70b"},
            "cluster": {"node_groups": [H100_NODES_8]},
            "workload": TRAINING_WORKLOAD,
            "plan": TRAINING_PLAN,
        },
    ),
    "moe-training": _example(
        "One Mixtral-8x7B plan with expert parallelism on 16 H100",
        "EP8 inside each node, TP2, DP8, full recompute (selective recompute does not fit "
        "80 GB): experts spread over eight GPUs per layer.",
        {
            "model": {"preset": "mixtral-8x7b"},
            "cluster": {"node_groups": [{**H100_NODE, "num_nodes": 2}]},
            "workload": {**TRAINING_WORKLOAD, "global_batch_size": 256},
            "plan": {
                "parallelism": {
                    "data": 8,
                    "tensor": 2,
                    "pipeline": 1,
                    "expert": 8,
                    "sequence_parallel": True,
                },
                "micro_batch_size": 1,
                "zero_stage": 1,
                "recompute": "full",
            },
        },
    ),
    "serving": _example(
        "One Llama-3-70B serving layout on 8 H100",
        "Two TP4 instances; latencies at the goodput rate (no `arrival_rate_rps`).",
        {
            "model": {"preset": "llama3-70b"},
            "cluster": {"node_groups": [H100_NODE]},
            "workload": SERVING_WORKLOAD,
            "plan": SERVING_PLAN,
        },
    ),
}
"""Request examples of `POST /v1/estimate`."""

RESOLVE_EXAMPLES: dict[str, Example] = {
    "preset": _example("A preset", "By name or alias.", {"model": {"preset": "llama3-8b"}}),
    "hf-config": _example(
        "A Hugging Face config.json",
        "Read as the architecture it names (here Qwen2-7B's shape).",
        {
            "model": {
                "hf_config": {
                    "architectures": ["Qwen2ForCausalLM"],
                    "model_type": "qwen2",
                    "num_hidden_layers": 28,
                    "hidden_size": 3584,
                    "num_attention_heads": 28,
                    "num_key_value_heads": 4,
                    "intermediate_size": 18944,
                    "vocab_size": 152064,
                    "tie_word_embeddings": False,
                    "rope_theta": 1000000.0,
                    "max_position_embeddings": 131072,
                    "rms_norm_eps": 1e-06,
                }
            }
        },
    ),
    "explicit-moe": _example(
        "An explicit MoE spec",
        "Every field the planner needs, with an `moe` block (here DeepSeek-style shared "
        "experts and leading dense layers).",
        {
            "model": {
                "name": "my-moe",
                "num_layers": 24,
                "hidden_size": 2048,
                "num_attention_heads": 16,
                "num_kv_heads": 16,
                "ffn_hidden_size": 8192,
                "vocab_size": 102400,
                "moe": {
                    "num_experts": 64,
                    "top_k": 6,
                    "expert_ffn_hidden_size": 1408,
                    "num_shared_experts": 2,
                    "num_dense_layers": 1,
                },
            }
        },
    ),
}
"""Request examples of `POST /v1/models/resolve`."""
