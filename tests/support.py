"""Constants and imports shared by test modules (import them from here, not from `conftest`,
whose module name is ambiguous when several test directories have one)."""

from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():
    # starlette warns once, at import, that it prefers httpx2 over httpx
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TINY_MODEL: dict[str, Any] = {
    "name": "tiny",
    "num_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_kv_heads": 4,
    "ffn_hidden_size": 1024,
    "vocab_size": 1000,
}
TINY_CLUSTER: dict[str, Any] = {
    "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4}]
}
TINY_WORKLOAD: dict[str, Any] = {
    "kind": "training",
    "global_batch_size": 8,
    "sequence_length": 512,
    "precision": "bf16",
}

__all__ = ["TINY_CLUSTER", "TINY_MODEL", "TINY_WORKLOAD", "TestClient"]


MIXED_PRICED_CLUSTER: dict[str, Any] = {
    "node_groups": [
        {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4},
        {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 4, "price_per_gpu_hour": 0.5},
    ]
}
"""One node of 4 H100 at the catalog price and one of 4 A100 80GB at $0.50 per GPU-hour:
the A100 pool is the cheaper per token (objectives and Pareto on a mixed cluster)."""
