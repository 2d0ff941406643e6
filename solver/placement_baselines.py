r"""MoE expert placements: how one is evaluated and checked, and three baseline policies.

A layer's placement is `rank_experts[g]`, the experts whose copies rank g holds. Expert e has
r_e = #{g : e ∈ rank_experts[g]} copies and each copy serves w_e / r_e tokens (the load of a
replicated expert is split evenly over its copies, as DeepSeek-V3's redundant experts are,
DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" §3.4). Rank load L_g = Σ_{e on g} w_e / r_e;
imbalance = max_g L_g / mean_g L_g.

Cross-node traffic with uniform senders: every rank sends 1/G of each expert's tokens, so
node n sends w_e·N/G of them (N ranks per node, G ranks). Node n's c_{e,n} copies can serve
at most c_{e,n}·w_e/r_e tokens, so the fewest tokens that leave their node (the min-cost
transport from senders to copies with cost 1 across nodes, 0 within) is

    D_e = w_e · (1 − Σ_n min(c_{e,n} / r_e, N / G)),

which is w_e·(1 − N/G) for an expert with one copy (the brief's formula), and shrinks when the
copies of a replicated expert sit on different nodes. With coactivation counts C[i][j] (tokens
at expert i of layer l and expert j of layer l+1), a token moves from a copy of i to a copy
of j; with the shares a_{i,n} = c_{i,n}/r_i and b_{j,n} = c_{j,n}/r_j, the fewest that cross
nodes is C[i][j]·(1 − Σ_n min(a_{i,n}, b_{j,n})) (the total-variation distance of the two
node distributions).

Baselines (each a pure function returning `rank_experts`): `round_robin`, `greedy_lpt`
(Graham 1969) and `eplb_hierarchical` (DeepSeek's Expert Parallelism Load Balancer, from its
public description). They ignore `num_groups` except `eplb_hierarchical`, which packs whole
groups onto nodes when it can.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

Placement = list[list[int]]


# ---- evaluation --------------------------------------------------------------------------
def replica_counts(rank_experts: Sequence[Sequence[int]], num_experts: int) -> list[int]:
    """r_e: copies of every expert."""
    counts = [0] * num_experts
    for experts in rank_experts:
        for e in experts:
            counts[e] += 1
    return counts


def rank_loads(loads: Sequence[float], rank_experts: Sequence[Sequence[int]]) -> list[float]:
    """L_g = Σ_{e on g} w_e / r_e (tokens)."""
    counts = replica_counts(rank_experts, len(loads))
    return [sum(loads[e] / counts[e] for e in experts) for experts in rank_experts]


def imbalance(loads_per_rank: Sequence[float]) -> float:
    """max / mean of the rank loads (1.0 when all are zero)."""
    total = sum(loads_per_rank)
    if total <= 0.0:
        return 1.0
    return max(loads_per_rank) * len(loads_per_rank) / total


def node_shares(
    rank_experts: Sequence[Sequence[int]], num_experts: int, ranks_per_node: int
) -> list[dict[int, float]]:
    """a_{e,n} = c_{e,n} / r_e for every expert (nodes without a copy left out)."""
    counts = replica_counts(rank_experts, num_experts)
    shares: list[dict[int, float]] = [{} for _ in range(num_experts)]
    for g, experts in enumerate(rank_experts):
        node = g // ranks_per_node
        for e in experts:
            shares[e][node] = shares[e].get(node, 0.0) + 1.0 / counts[e]
    return shares


def dispatch_traffic(
    loads: Sequence[float], rank_experts: Sequence[Sequence[int]], ranks_per_node: int
) -> float:
    """Σ_e D_e: tokens that leave their node with uniform senders (module docstring)."""
    sender_share = ranks_per_node / len(rank_experts)
    shares = node_shares(rank_experts, len(loads), ranks_per_node)
    return sum(
        w * (1.0 - sum(min(a, sender_share) for a in shares[e].values()))
        for e, w in enumerate(loads)
    )


def coactivation_traffic(
    coactivation: Sequence[Sequence[float]],
    previous: Sequence[Sequence[int]],
    current: Sequence[Sequence[int]],
    ranks_per_node: int,
) -> float:
    """Σ_{i,j} C[i][j]·(1 − Σ_n min(a_{i,n}, b_{j,n})): tokens that cross nodes between the
    experts of `previous` (layer l) and `current` (layer l + 1)."""
    experts = len(coactivation)
    a = node_shares(previous, experts, ranks_per_node)
    b = node_shares(current, experts, ranks_per_node)
    total = 0.0
    for i, row in enumerate(coactivation):
        for j, count in enumerate(row):
            if count > 0.0:
                overlap = sum(min(share, b[j].get(n, 0.0)) for n, share in a[i].items())
                total += count * (1.0 - overlap)
    return total


def verify_placement(
    rank_experts: Sequence[Sequence[int]],
    *,
    num_experts: int,
    num_redundant: int,
    ranks_per_node: int,
    num_groups: int | None = None,
) -> None:
    """Check every constraint of the placement model (Alpa-style post-check).

    Raises:
        AssertionError: naming the constraint the placement breaks.
    """
    ranks = len(rank_experts)
    slots = (num_experts + num_redundant) // ranks
    for g, experts in enumerate(rank_experts):
        assert len(experts) == slots, f"rank {g} holds {len(experts)} copies, not {slots}"
        assert len(set(experts)) == len(experts), f"rank {g} holds an expert twice"
        assert all(0 <= e < num_experts for e in experts), f"rank {g}: unknown expert"
    counts = replica_counts(rank_experts, num_experts)
    assert min(counts) >= 1, f"expert {counts.index(0)} has no copy"
    assert sum(counts) - num_experts == num_redundant, "redundant copies != num_redundant"
    if num_groups is not None:
        size = num_experts // num_groups
        node_of_group: dict[int, int] = {}
        for g, experts in enumerate(rank_experts):
            for e in experts:
                node = node_of_group.setdefault(e // size, g // ranks_per_node)
                assert node == g // ranks_per_node, f"group {e // size} spans two nodes"


# ---- building blocks ---------------------------------------------------------------------
def replicate_by_load_per_copy(
    loads: Sequence[float], extra: int, max_copies: int
) -> list[int]:
    """Replica counts: start at one copy each, then `extra` times give one more copy to the
    expert with the largest load / copies (ties: lowest index) that has < `max_copies`.

    This is EPLB's replication step ("replicate the expert with the largest load per
    replica", DeepSeek-AI, github.com/deepseek-ai/EPLB README) and the classic greedy for
    minimising the largest piece (each step lowers the current maximum piece).
    """
    counts = [1] * len(loads)
    heap = [(-w, e) for e, w in enumerate(loads)]
    heapq.heapify(heap)
    for _ in range(extra):
        while True:
            _, e = heapq.heappop(heap)
            if counts[e] < max_copies:
                break
        counts[e] += 1
        if counts[e] < max_copies:
            heapq.heappush(heap, (-loads[e] / counts[e], e))
    return counts


def _place(placement: Placement, loads_now: list[float], slots: int, g: int, e: int,
           piece: float) -> None:
    placement[g].append(e)
    loads_now[g] += piece
    assert len(placement[g]) <= slots


def _repair(placement: Placement, loads_now: list[float], pieces: dict[int, float],
            slots: int, e: int) -> None:
    """Place a copy of e when every rank with a free slot already holds e: move some expert
    f from a full rank g without e to such a rank h, then put e on g.

    A (g, f) exists: some rank g lacks e (r_e ≤ G and a copy is still unplaced), g is full
    (else it would have been chosen) and h holds fewer than `slots` experts, so g holds an
    expert f that h does not (pigeonhole); f ≠ e since g lacks e. Among the choices, the one
    with the smallest resulting max(load_g − f + e, load_h + f) is taken.
    """
    free = [h for h in range(len(placement)) if len(placement[h]) < slots]
    best: tuple[float, int, int, int] | None = None
    for h in free:
        for g, experts in enumerate(placement):
            if e in experts or len(experts) < slots:
                continue
            for f in experts:
                if f in placement[h]:
                    continue
                worst = max(loads_now[g] - pieces[f] + pieces[e], loads_now[h] + pieces[f])
                if best is None or (worst, h, g, f) < best:
                    best = (worst, h, g, f)
    assert best is not None, "no repair move (impossible when r_e ≤ ranks)"
    _, h, g, f = best
    placement[g].remove(f)
    loads_now[g] -= pieces[f]
    _place(placement, loads_now, slots, h, f, pieces[f])
    _place(placement, loads_now, slots, g, e, pieces[e])


def lpt_assign(
    loads: Sequence[float], counts: Sequence[int], num_ranks: int, slots: int
) -> Placement:
    """Longest-processing-time assignment of copies to ranks with `slots` slots each.

    Copies (expert e, piece w_e / r_e) in decreasing piece order (ties: lower e) go to the
    least-loaded rank (ties: lower rank) with a free slot that does not hold e yet (Graham
    1969, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math. 17(2), the LPT
    rule, with a cardinality limit per machine); `_repair` handles a copy with no such rank.

    Returns:
        rank_experts (each sorted).
    """
    pieces = {e: loads[e] / counts[e] for e in range(len(loads))}
    items = sorted(((pieces[e], e) for e in range(len(loads)) for _ in range(counts[e])),
                   key=lambda item: (-item[0], item[1]))
    placement: Placement = [[] for _ in range(num_ranks)]
    loads_now = [0.0] * num_ranks
    for piece, e in items:
        candidates = [g for g in range(num_ranks)
                      if len(placement[g]) < slots and e not in placement[g]]
        if candidates:
            g = min(candidates, key=lambda r: (loads_now[r], r))
            _place(placement, loads_now, slots, g, e, piece)
        else:
            _repair(placement, loads_now, pieces, slots, e)
    return [sorted(experts_of_rank) for experts_of_rank in placement]


# ---- the baselines -----------------------------------------------------------------------
def round_robin(loads: Sequence[float], num_ranks: int, num_redundant: int) -> Placement:
    """Round-robin placement: physical slot i goes to rank i mod G.

    Slots 0..E−1 hold experts 0..E−1 (expert e on rank e mod G, the default static placement
    of expert parallelism, e.g. GShard, Lepikhin et al. 2021 §2); the R redundant slots hold
    one more copy of the experts in decreasing load order, cycling when R > E. A copy whose
    rank already holds the expert goes to the next rank (cyclically) with a free slot that
    does not (or `_repair` when none).
    """
    experts = len(loads)
    slots = (experts + num_redundant) // num_ranks
    hottest = sorted(range(experts), key=lambda e: (-loads[e], e))
    physical = list(range(experts)) + [hottest[j % experts] for j in range(num_redundant)]
    counts = replica_counts([physical], experts)
    pieces = {e: loads[e] / counts[e] for e in range(experts)}
    placement: Placement = [[] for _ in range(num_ranks)]
    loads_now = [0.0] * num_ranks
    for i, e in enumerate(physical):
        for step in range(num_ranks):
            g = (i + step) % num_ranks
            if len(placement[g]) < slots and e not in placement[g]:
                _place(placement, loads_now, slots, g, e, pieces[e])
                break
        else:
            _repair(placement, loads_now, pieces, slots, e)
    return [sorted(x) for x in placement]


def greedy_lpt(loads: Sequence[float], num_ranks: int, num_redundant: int) -> Placement:
    """Greedy placement: `replicate_by_load_per_copy` (one copy at a time to the largest
    load/copies, at most one copy per rank), then `lpt_assign` (Graham 1969 LPT)."""
    counts = replicate_by_load_per_copy(loads, num_redundant, num_ranks)
    slots = (len(loads) + num_redundant) // num_ranks
    return lpt_assign(loads, counts, num_ranks, slots)


def _balanced_packing(weights: Sequence[float], num_bins: int) -> list[list[int]]:
    """Items in decreasing weight (ties: lower index) to the lightest bin (ties: lower bin)
    that holds fewer than len(weights)/num_bins items: equal counts, balanced weights."""
    capacity = len(weights) // num_bins
    bins: list[list[int]] = [[] for _ in range(num_bins)]
    totals = [0.0] * num_bins
    for item in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        b = min((b for b in range(num_bins) if len(bins[b]) < capacity),
                key=lambda b: (totals[b], b))
        bins[b].append(item)
        totals[b] += weights[item]
    return bins


def eplb_hierarchical(
    loads: Sequence[float],
    num_ranks: int,
    ranks_per_node: int,
    num_redundant: int,
    num_groups: int | None = None,
) -> Placement:
    """EPLB-style hierarchical placement (DeepSeek-AI, "Expert Parallelism Load Balancer",
    github.com/deepseek-ai/EPLB README, hierarchical load balancing policy; written from its
    description):

    1. pack the expert groups onto nodes, equal group counts per node, balancing node load;
    2. inside each node, replicate its experts to the node's share of physical slots by the
       largest load/copies (at most one copy per rank, so ≤ ranks_per_node copies);
    3. pack the node's copies onto its GPUs, equal counts, balancing GPU load (LPT).

    Without `num_groups` every expert is its own group. When groups or redundant copies do
    not split evenly over nodes (or a node's copies cannot sit on distinct GPUs), the
    README's global policy applies: one node holding all
    ranks (steps 2-3 over the whole group).
    """
    experts = len(loads)
    nodes = num_ranks // ranks_per_node
    groups = num_groups if num_groups is not None else experts
    if (groups % nodes or num_redundant % nodes or experts % groups
            or num_redundant // nodes > experts // nodes * (ranks_per_node - 1)):
        nodes, groups, ranks_per_node = 1, 1, num_ranks
    size = experts // groups
    group_loads = [sum(loads[g * size:(g + 1) * size]) for g in range(groups)]
    slots = (experts + num_redundant) // num_ranks
    placement: Placement = [[] for _ in range(num_ranks)]
    for node, node_groups in enumerate(_balanced_packing(group_loads, nodes)):
        local = [e for grp in sorted(node_groups) for e in range(grp * size, (grp + 1) * size)]
        local_loads = [loads[e] for e in local]
        counts = replicate_by_load_per_copy(local_loads, num_redundant // nodes, ranks_per_node)
        node_placement = lpt_assign(local_loads, counts, ranks_per_node, slots)
        for i, held in enumerate(node_placement):
            placement[node * ranks_per_node + i] = sorted(local[k] for k in held)
    return placement
