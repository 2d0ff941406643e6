"""MoE expert placement benchmark: imbalance (max / mean rank load) of round-robin, greedy
LPT, EPLB-style hierarchical and the CP-SAT placement on synthetic Zipf loads, with our
solve time and status/gap. Prints a table; not a test.

Loads: `tokens` token-expert assignments drawn from a Zipf(skew) popularity over a random
order of the experts, one draw per layer (skew 0 = uniform popularity, multinomial noise
only). No public per-expert routing statistics were available as a package here, so the
loads are synthetic.

    .venv/bin/python -m bench.moe_placement [--layers 2] [--layer-time-s 1.0] [--quick]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from solver.formulations.expert_placement import DEFAULT_NUM_WORKERS, solve_expert_placement
from specs.placement import ExpertPlacementRequest

SKEWS = (0.0, 0.6, 1.0, 1.4)
EXPERTS = (64, 128, 256)
RANKS = (8, 16, 32, 64)
REDUNDANT = (0, 8, 32)
RANKS_PER_NODE = 8
TOKENS_PER_EXPERT = 512


def zipf_loads(experts: int, skew: float, tokens: int, rng: random.Random) -> list[float]:
    """Token counts per expert: `tokens` draws from p_e ∝ 1 / rank_e^skew (Zipf 1949)."""
    order = list(range(experts))
    rng.shuffle(order)
    weights = [0.0] * experts
    for rank, e in enumerate(order):
        weights[e] = 1.0 / (rank + 1) ** skew
    counts = [0.0] * experts
    for e in rng.choices(range(experts), weights=weights, k=tokens):
        counts[e] += 1.0
    return counts


def run_case(
    experts: int,
    ranks: int,
    redundant: int,
    skew: float,
    layers: int,
    layer_time_s: float,
    seed: int,
) -> dict[str, float | str]:
    rng = random.Random(seed)
    loads = [zipf_loads(experts, skew, experts * TOKENS_PER_EXPERT, rng) for _ in range(layers)]
    request = ExpertPlacementRequest(
        loads=loads,
        num_ranks=ranks,
        ranks_per_node=min(RANKS_PER_NODE, ranks),
        num_redundant=redundant,
        time_limit_s=layer_time_s * layers,
    )
    start = time.perf_counter()
    result = solve_expert_placement(request)
    wall_s = time.perf_counter() - start
    row: dict[str, float | str] = {}
    for name in ("round_robin", "greedy", "eplb"):
        row[name] = statistics.mean(layer.baselines[name] for layer in result.layers)
    row["ours"] = statistics.mean(layer.imbalance for layer in result.layers)
    row["time_s"] = max(layer.solve_time_s for layer in result.layers)
    row["wall_s"] = wall_s
    row["optimal"] = f"{sum(layer.status.value == 'optimal' for layer in result.layers)}/{layers}"
    row["gap"] = max(layer.gap for layer in result.layers)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--layer-time-s", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="skews 0 and 1.4 only")
    args = parser.parse_args()
    skews = (0.0, 1.4) if args.quick else SKEWS
    print(
        f"CP-SAT workers {DEFAULT_NUM_WORKERS}, {args.layers} layers per case, "
        f"{args.layer_time_s:g} s per layer, {RANKS_PER_NODE} ranks per node, "
        f"{TOKENS_PER_EXPERT} tokens per expert; imbalance = max/mean rank load "
        "(mean over layers)"
    )
    header = (
        f"{'experts':>7} {'ranks':>5} {'redund':>6} {'skew':>4} | {'rr':>6} "
        f"{'greedy':>6} {'eplb':>6} {'ours':>6} | {'layer_s':>7} {'optimal':>7} "
        f"{'gap':>7}"
    )
    print(header)
    print("-" * len(header))
    seed = 0
    for experts in EXPERTS:
        for ranks in RANKS:
            for redundant in REDUNDANT:
                if (experts + redundant) % ranks:
                    continue
                for skew in skews:
                    seed += 1
                    row = run_case(
                        experts, ranks, redundant, skew, args.layers, args.layer_time_s, seed
                    )
                    print(
                        f"{experts:>7} {ranks:>5} {redundant:>6} {skew:>4.1f} | "
                        f"{row['round_robin']:>6.3f} {row['greedy']:>6.3f} "
                        f"{row['eplb']:>6.3f} {row['ours']:>6.3f} | "
                        f"{row['time_s']:>7.2f} {row['optimal']:>7} {row['gap']:>7.4f}",
                        flush=True,
                    )
    print()
    print("headline: 256 experts on 64 ranks (8 per node), one layer, time limit 2 s")
    for redundant in (0, 64):
        for skew in SKEWS:
            seed += 1
            row = run_case(256, 64, redundant, skew, 1, 2.0, seed)
            print(
                f"  redundant {redundant:>2} skew {skew:.1f}: ours {row['ours']:.4f} "
                f"(greedy {row['greedy']:.4f}, eplb {row['eplb']:.4f}, rr "
                f"{row['round_robin']:.4f}), wall {row['wall_s']:.2f} s, "
                f"optimal {row['optimal']}, gap {row['gap']:.4f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
