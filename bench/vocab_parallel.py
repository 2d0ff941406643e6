"""Vocabulary parallelism against the paper's own table: predicted vs published throughput
gain and peak memory of the naive layout and the one-barrier algorithm.

Published: Yeung et al., "Balancing Pipeline Parallelism with Vocabulary Parallelism",
MLSys 2025 (arXiv 2411.05288), Table 5 ("Comparison of Methods on 1F1B"), the 8-GPU rows
at sequence length 2048: a ~4B GPT (32 layers, hidden 3072, 24 heads, FFN 4h), pipeline 8
(one stage per GPU), micro-batch 1, 128 micro-batches, vocabularies 32k-256k; methods
"Baseline" (Megatron's layout, even split) and "Vocab-2" (the one-barrier algorithm, the
sail-sg fork's default, what `plan.vocab_parallel` prices). The fork's artifact
(`artifact/README.md`) runs them "on single server with 8 A100 GPUs": an 8 × A100 80 GB
node here. The gain is the MFU ratio (same model FLOPs); memory is the peak over stages.

Usage: `python -m bench.vocab_parallel`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_models.analytical.training import AnalyticalTrainingCostModel  # noqa: E402
from cost_models.base import TrainingProblem  # noqa: E402
from hardware_catalog import resolve_cluster  # noqa: E402
from specs import ClusterSpec, TrainingWorkload  # noqa: E402
from specs.model import ModelSpec  # noqa: E402
from specs.plan import ParallelDims, TrainingPlan  # noqa: E402

PUBLISHED = {
    # vocabulary: (Baseline MFU %, Vocab-2 MFU %, Baseline peak GB, Vocab-2 peak GB)
    32_000: (46.16, 50.23, 14.86, 14.83),
    64_000: (40.48, 50.18, 16.32, 15.23),
    128_000: (33.11, 49.82, 19.25, 16.04),
    256_000: (25.23, 49.69, 25.64, 17.78),
}
"""Table 5 of Yeung et al. 2025, 8 GPUs, sequence 2048."""


def predict(vocab: int) -> tuple[float, float, float, float]:
    """(naive MFU, vocabulary-parallel MFU, naive peak GiB, vocabulary-parallel peak GiB)."""
    model = ModelSpec(
        name=f"yeung-4b-{vocab // 1000}k",
        num_layers=32,
        hidden_size=3072,
        num_attention_heads=24,
        num_kv_heads=24,
        ffn_hidden_size=4 * 3072,
        vocab_size=vocab,
        gated_mlp=False,
    )
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 8}]}
        )
    )
    problem = TrainingProblem(
        model=model,
        cluster=cluster,
        workload=TrainingWorkload(global_batch_size=128, sequence_length=2048),
    )
    cm = AnalyticalTrainingCostModel()
    out = []
    for vocab_parallel in (False, True):
        plan = TrainingPlan(
            parallelism=ParallelDims(pipeline=8),
            micro_batch_size=1,
            stage_layers=[4] * 8,
            vocab_parallel=vocab_parallel,
            framework="megatron_core",
        )
        out.append(cm.evaluate(problem, plan))
    naive, vocab_est = out
    return (
        naive.metrics.mfu,
        vocab_est.metrics.mfu,
        naive.metrics.peak_memory_gib,
        vocab_est.metrics.peak_memory_gib,
    )


def main() -> None:
    print(
        f"{'vocab':>7} {'gain pred':>9} {'gain pub':>8} {'peak ratio pred':>15} "
        f"{'peak ratio pub':>14} {'naive MFU pred/pub':>18} {'vocab MFU pred/pub':>18}"
    )
    for vocab, (mfu_n, mfu_v, mem_n, mem_v) in PUBLISHED.items():
        p_n, p_v, pm_n, pm_v = predict(vocab)
        print(
            f"{vocab:>7} {p_v / p_n:>9.3f} {mfu_v / mfu_n:>8.3f} {pm_v / pm_n:>15.3f} "
            f"{mem_v / mem_n:>14.3f} {p_n * 100:>9.1f}/{mfu_n:<8.1f} {p_v * 100:>9.1f}/{mfu_v:<8.1f}"
        )


if __name__ == "__main__":
    main()
