"""Builders for the cost-model tests: accelerators, clusters and models built directly (no
catalog, no presets), so these tests do not depend on the catalog loader."""

from __future__ import annotations

from hardware_catalog.schema import AcceleratorSpec, ResolvedCluster, ResolvedNodeGroup, Source
from specs.model import ModelSpec

_SRC = [Source(ref="tests", supports="fixture values from docs/reference/hardware_catalog.md")]


def make_h100() -> AcceleratorSpec:
    return AcceleratorSpec(
        id="h100-sxm",
        name="H100 SXM",
        vendor="nvidia",
        memory_gib=79.65,
        memory_bandwidth_gb_s=3350,
        peak_tflops={"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
        scale_up_bandwidth_gb_s=450,
        scale_out_bandwidth_gb_s=50,
        scale_up_domain_size=8,
        gpus_per_node=8,
        gemm_efficiency=0.803,
        gemm_efficiency_fp8=0.709,
        scale_up_efficiency=0.82,
        scale_out_efficiency=0.97,
        sources=_SRC,
    )


def make_a100() -> AcceleratorSpec:
    return AcceleratorSpec(
        id="a100-sxm4-80gb",
        name="A100 SXM4 80GB",
        vendor="nvidia",
        memory_gib=80.0,
        memory_bandwidth_gb_s=2039,
        peak_tflops={"bf16": 312.0, "fp16": 312.0, "fp8": None},
        scale_up_bandwidth_gb_s=300,
        scale_out_bandwidth_gb_s=25,
        scale_up_domain_size=8,
        gpus_per_node=8,
        gemm_efficiency=0.869,
        scale_up_efficiency=0.78,
        scale_out_efficiency=0.96,
        sources=_SRC,
    )


def make_cluster(acc: AcceleratorSpec, num_nodes: int, gpus_per_node: int = 8) -> ResolvedCluster:
    return ResolvedCluster(
        groups=[
            ResolvedNodeGroup(
                accelerator=acc,
                num_nodes=num_nodes,
                gpus_per_node=gpus_per_node,
                intra_node_bandwidth_gb_s=acc.scale_up_bandwidth_gb_s,
                inter_node_bandwidth_gb_s=acc.scale_out_bandwidth_gb_s,
            )
        ]
    )


def llama3_70b() -> ModelSpec:
    return ModelSpec(
        name="llama3-70b",
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        ffn_hidden_size=28672,
        vocab_size=128256,
    )


def gpt(
    layers: int = 24, h: int = 2048, a: int = 16, vocab: int = 51200, dropout: bool = True
) -> ModelSpec:
    """A GPT-3-style layer: plain 4h MLP, multi-head attention, LayerNorm, biases."""
    return ModelSpec(
        name="gpt",
        num_layers=layers,
        hidden_size=h,
        num_attention_heads=a,
        ffn_hidden_size=4 * h,
        vocab_size=vocab,
        gated_mlp=False,
        norm="layernorm",
        attention_bias=True,
        mlp_bias=True,
        dropout=dropout,
        tie_embeddings=True,
    )
