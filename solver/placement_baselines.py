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

A stronger heuristic, not a baseline (it hints the CP-SAT program of
`solver.formulations.expert_placement` and is its fallback answer): `dual_search` sweeps a cap
on the largest piece (dual approximation, Hochbaum & Shmoys 1987), packs each replica vector
by the balanced differencing method (`differencing_assign`, Karmarkar & Karp 1982) and
improves the best packings by exchanging copies (`swap_local_search`) and moving copies
between experts (`replica_transfer_search`); `grouped_dual_search` runs it per node under
group-limited routing.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterator, Sequence

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
def replicate_by_load_per_copy(loads: Sequence[float], extra: int, max_copies: int) -> list[int]:
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


def _place(
    placement: Placement, loads_now: list[float], slots: int, g: int, e: int, piece: float
) -> None:
    placement[g].append(e)
    loads_now[g] += piece
    assert len(placement[g]) <= slots


def _repair(
    placement: Placement, loads_now: list[float], pieces: dict[int, float], slots: int, e: int
) -> None:
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
    items = sorted(
        ((pieces[e], e) for e in range(len(loads)) for _ in range(counts[e])),
        key=lambda item: (-item[0], item[1]),
    )
    placement: Placement = [[] for _ in range(num_ranks)]
    loads_now = [0.0] * num_ranks
    for piece, e in items:
        candidates = [
            g for g in range(num_ranks) if len(placement[g]) < slots and e not in placement[g]
        ]
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
        b = min(
            (b for b in range(num_bins) if len(bins[b]) < capacity), key=lambda b: (totals[b], b)
        )
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
    if (
        groups % nodes
        or num_redundant % nodes
        or experts % groups
        or num_redundant // nodes > experts // nodes * (ranks_per_node - 1)
    ):
        nodes, groups, ranks_per_node = 1, 1, num_ranks
    size = experts // groups
    group_loads = [sum(loads[g * size : (g + 1) * size]) for g in range(groups)]
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


# ---- a stronger heuristic: the hint and fallback of the CP-SAT program (not a baseline) ----
SEARCH_COARSE_STEP = 1.08
"""Ratio between consecutive piece caps of `dual_search`'s coarse sweep."""
SEARCH_FINE_STEP = 1.01
"""Ratio between consecutive piece caps of its fine sweep around the best coarse cap."""
SEARCH_POLISHED = 4
"""Best packings of the sweep that `swap_local_search` improves."""
TRANSFER_DONORS = 10
"""Experts that `replica_transfer_search` may take a copy from (cheapest first)."""
TRANSFER_BUSY_RANKS = 1
"""Busiest ranks whose experts `replica_transfer_search` may give a copy to."""
TRANSFER_TRIES = 5
"""Best transfers (before local search) that `replica_transfer_search` polishes per step."""


def differencing_assign(
    loads: Sequence[float], counts: Sequence[int], num_ranks: int, slots: int
) -> Placement | None:
    """Copies to ranks, exactly `slots` per rank, by the balanced largest differencing method.

    The copies (pieces w_e / r_e) are sorted by decreasing size and cut into `slots` layers of
    `num_ranks` consecutive pieces; each layer is a partial placement with one piece per rank.
    Repeatedly the two partial placements with the largest spread (max − min rank load) are
    merged, the heaviest rank of one with the lightest of the other, until one is left: the
    differencing method of Karmarkar & Karp (1982, "The differencing method of set
    partitioning", UC Berkeley report UCB/CSD 82/113) in its balanced multiway form (every
    part gets the same number of items; Michiels, Korst, Aarts & van Leeuwen 2003,
    "Performance ratios for the differencing method applied to the balanced number
    partitioning problem", STACS 2003, LNCS 2607). Written from those descriptions.

    At most one copy of an expert per rank: when a merge would put two copies of e on a rank,
    that rank's partner is exchanged with the nearest partner (in merge order) that makes
    both pairs conflict-free.

    Returns:
        rank_experts (each sorted), or None when a conflict could not be removed.
    """
    items = sorted(
        ((loads[e] / counts[e], e) for e in range(len(loads)) for _ in range(counts[e])),
        key=lambda item: (-item[0], item[1]),
    )
    assert len(items) == num_ranks * slots
    heap: list[tuple[float, int, list[tuple[float, list[int]]]]] = []
    for layer in range(slots):
        part = [(piece, [e]) for piece, e in items[layer * num_ranks : (layer + 1) * num_ranks]]
        heap.append((-(part[0][0] - part[-1][0]), layer, part))
    heapq.heapify(heap)
    order = slots
    while len(heap) > 1:
        first = sorted(heapq.heappop(heap)[2], key=lambda b: -b[0])
        second = sorted(heapq.heappop(heap)[2], key=lambda b: b[0])
        for i in range(num_ranks):
            if set(first[i][1]).isdisjoint(second[i][1]):
                continue
            for j in _outward(i, num_ranks):
                if set(first[i][1]).isdisjoint(second[j][1]) and set(first[j][1]).isdisjoint(
                    second[i][1]
                ):
                    second[i], second[j] = second[j], second[i]
                    break
            else:
                return None
        merged = [(a[0] + b[0], a[1] + b[1]) for a, b in zip(first, second, strict=True)]
        spread = max(m[0] for m in merged) - min(m[0] for m in merged)
        heapq.heappush(heap, (-spread, order, merged))
        order += 1
    return [sorted(experts) for _, experts in heap[0][2]]


def _outward(i: int, n: int) -> Iterator[int]:
    """i + 1, i − 1, i + 2, i − 2, ... within 0..n − 1."""
    for step in range(1, n):
        if i + step < n:
            yield i + step
        if i - step >= 0:
            yield i - step


def swap_local_search(
    loads: Sequence[float],
    placement: Sequence[Sequence[int]],
    *,
    deadline: float | None = None,
) -> Placement:
    """Improve a placement by pairwise exchanges of copies (replica counts stay fixed).

    A move exchanges a copy a on a busiest rank g with a copy c on another rank h (a ∉ h,
    c ∉ g; slot counts unchanged) when max(L_g − d, L_h + d) < L_g for d = piece_a − piece_c;
    the move that minimises max(L_g − d, L_h + d) is taken, and the search stops when no
    rank at the maximum load has an improving move (or at `deadline`, time.monotonic()).
    This is the pairwise-interchange neighbourhood of local search for makespan scheduling
    (Finn & Horowitz 1979, "A linear time approximation algorithm for multiprocessor
    scheduling", BIT 19(3), 312-320); each move lowers one busiest rank without creating a
    rank as busy, so the sorted load vector decreases and the search ends.
    """

    counts = replica_counts(placement, len(loads))
    piece = [w / c if c else 0.0 for w, c in zip(loads, counts, strict=True)]
    held = [set(experts) for experts in placement]
    load = [sum(piece[e] for e in experts) for experts in held]
    ranks = len(held)
    while deadline is None or time.monotonic() < deadline:
        top = max(load)
        moved = False
        for g in [r for r in range(ranks) if load[r] >= top]:
            if deadline is not None and time.monotonic() >= deadline:
                break
            tolerance = 1e-12 * load[g]
            best: tuple[float, int, int, int] | None = None
            for a in held[g]:
                for h in range(ranks):
                    if h == g or a in held[h] or load[h] + tolerance >= load[g]:
                        continue
                    for c in held[h]:
                        d = piece[a] - piece[c]
                        if d <= 0.0 or c in held[g]:
                            continue
                        worst = max(load[g] - d, load[h] + d)
                        if worst < load[g] - tolerance and (best is None or worst < best[0]):
                            best = (worst, a, h, c)
            if best is not None:
                _, a, h, c = best
                d = piece[a] - piece[c]
                held[g].remove(a)
                held[g].add(c)
                held[h].remove(c)
                held[h].add(a)
                load[g] -= d
                load[h] += d
                moved = True
                break
        if not moved:
            break
    return [sorted(experts) for experts in held]


def replica_transfer_search(
    loads: Sequence[float],
    placement: Sequence[Sequence[int]],
    max_copies: int,
    *,
    deadline: float | None = None,
) -> Placement:
    """Improve a placement by moving one copy from an expert to another, then swaps.

    A move takes a copy of expert f (r_f ≥ 2) off a rank h and gives its slot to a new copy
    of an expert e that sits on a busiest rank (r_e < `max_copies`, e ∉ h): e's pieces shrink
    to w_e / (r_e + 1) on every rank holding it, f's grow to w_f / (r_f − 1). The takers are
    the experts of the `TRANSFER_BUSY_RANKS` busiest ranks, the donors the `TRANSFER_DONORS`
    experts whose piece grows least, h the lightest rank holding f and not e. The
    `TRANSFER_TRIES` moves with the lowest max rank load are each followed by
    `swap_local_search`; the first that lowers the max rank load is kept, and the search
    repeats until no move does (or `deadline`, time.monotonic()). This changes the replica
    counts, which the swap neighbourhood cannot; the redundant budget and the slots stay as
    they are. (Our neighbourhood: the greedy's replication step, undone for one expert and
    redone for another where the packing needs it.)
    """
    experts, ranks = len(loads), len(placement)
    current = [list(held) for held in placement]
    while deadline is None or time.monotonic() < deadline:
        counts = replica_counts(current, experts)
        per_rank = rank_loads(loads, current)
        best = max(per_rank)
        if best <= 0.0:
            break
        by_load = sorted(range(ranks), key=lambda r: (-per_rank[r], r))
        hosts_of: list[list[int]] = [[] for _ in range(experts)]
        for g, held in enumerate(current):
            for e in held:
                hosts_of[e].append(g)
        takers = sorted(
            {e for g in by_load[:TRANSFER_BUSY_RANKS] for e in current[g] if counts[e] < max_copies}
        )
        donors = sorted(
            (f for f in range(experts) if counts[f] >= 2),
            key=lambda f: (loads[f] / (counts[f] - 1) - loads[f] / counts[f], f),
        )
        moves: list[tuple[float, int, int, int]] = []
        for e in takers:
            for f in donors[:TRANSFER_DONORS]:
                hosts = [h for h in hosts_of[f] if e not in current[h]]
                if f == e or not hosts:
                    continue
                h = min(hosts, key=lambda r: (per_rank[r], r))
                moves.append(
                    (_transfer_max(loads, counts, per_rank, by_load, hosts_of, e, f, h), e, f, h)
                )
        moves.sort()
        for _, e, f, h in moves[:TRANSFER_TRIES]:
            moved = [list(held) for held in current]
            moved[h].remove(f)
            moved[h].append(e)
            polished = swap_local_search(loads, moved, deadline=deadline)
            if max(rank_loads(loads, polished)) < best * (1.0 - 1e-12):
                current = polished
                break
        else:
            break
    return [sorted(held) for held in current]


def _transfer_max(
    loads: Sequence[float],
    counts: Sequence[int],
    per_rank: Sequence[float],
    by_load: Sequence[int],
    hosts_of: Sequence[Sequence[int]],
    e: int,
    f: int,
    h: int,
) -> float:
    """Max rank load after moving a copy of f on rank h to a new copy of e (only the ranks
    holding e or f change)."""
    gain = loads[e] / counts[e] - loads[e] / (counts[e] + 1)
    loss = loads[f] / (counts[f] - 1) - loads[f] / counts[f]
    changed = {g: per_rank[g] - gain for g in hosts_of[e]}
    for g in hosts_of[f]:
        changed[g] = changed.get(g, per_rank[g]) + loss
    changed[h] = per_rank[h] - loads[f] / counts[f] + loads[e] / (counts[e] + 1)
    rest = next((per_rank[g] for g in by_load if g not in changed), 0.0)
    return max(rest, *changed.values())


def _cap_counts(
    loads: Sequence[float], cap: float, max_copies: int, copies: int
) -> list[int] | None:
    """The fewest copies r_e = max(1, ⌈w_e / cap⌉) that cut every expert into pieces ≤ cap;
    None when some r_e > max_copies or Σ r_e > copies."""
    counts = []
    for w in loads:
        k = max(1, math.ceil(w / cap * (1.0 - 1e-12))) if cap > 0.0 else 1
        if k > max_copies:
            return None
        counts.append(k)
    return counts if sum(counts) <= copies else None


def _add_copies(
    loads: Sequence[float], counts: Sequence[int], extra: int, max_copies: int, largest: bool
) -> list[int]:
    """`extra` more copies, one at a time (ties: lower index), to the expert with < max_copies
    copies and the largest piece w_e / r_e (water-filling, as `replicate_by_load_per_copy`)
    or, `largest=False`, the smallest piece (fillers: tiny pieces that complete the ranks of
    big pieces)."""
    counts = list(counts)
    sign = -1.0 if largest else 1.0
    heap = [(sign * w / counts[e], e) for e, w in enumerate(loads) if counts[e] < max_copies]
    heapq.heapify(heap)
    for _ in range(extra):
        _, e = heapq.heappop(heap)
        counts[e] += 1
        if counts[e] < max_copies:
            heapq.heappush(heap, (sign * loads[e] / counts[e], e))
    return counts


def dual_search(
    loads: Sequence[float],
    num_ranks: int,
    num_redundant: int,
    *,
    max_copies: int | None = None,
    deadline: float | None = None,
    greedy: Placement | None = None,
) -> Placement:
    """Replica counts and placement by a sweep over the largest piece, then local search.

    Dual-approximation style (Hochbaum & Shmoys 1987, "Using dual approximation algorithms for
    scheduling problems: theoretical and practical results", J. ACM 34(1), 144-162): guess a
    piece cap c, take the fewest copies that cut every expert into pieces ≤ c,
    r_e = max(1, ⌈w_e / c⌉) (skipped when Σ r_e > E + R or some r_e > `max_copies`), hand the
    E + R − Σ r_e spare copies out by two rules (`_add_copies`: water-filling the largest
    pieces, or splitting the smallest experts into fillers), and pack by
    `differencing_assign`. A low cap leaves room on the rank of a big piece for its S − 1
    partners, which the greedy's water-filling (the lowest cap) does not; so c sweeps
    geometrically from the least possible largest piece (`replicate_by_load_per_copy`'s) up
    to greedy's max rank load in steps of `SEARCH_COARSE_STEP`, then by `SEARCH_FINE_STEP`
    around the best coarse cap. The `SEARCH_POLISHED` best packings, then `greedy_lpt`'s
    placement, go through `swap_local_search` and `replica_transfer_search`; every step keeps
    or lowers the max rank load and the best is returned (greedy's placement included), so
    the result is never worse than `greedy_lpt`. The sweep and both searches stop at `deadline`
    (time.monotonic()); `greedy_lpt`'s placement is always computed (or passed as `greedy`,
    which must be `greedy_lpt`'s, or any valid placement under `max_copies`).

    Returns:
        rank_experts (each sorted); at most one copy per rank, S = (E + R) / G per rank.
    """
    experts = len(loads)
    copies = experts + num_redundant
    slots = copies // num_ranks
    limit = min(num_ranks, 1 + num_redundant) if max_copies is None else max_copies
    floor_counts = replicate_by_load_per_copy(loads, num_redundant, limit)
    if greedy is None:
        greedy = lpt_assign(loads, floor_counts, num_ranks, slots)
    greedy_max = max(rank_loads(loads, greedy))
    least_piece = max(w / k for w, k in zip(loads, floor_counts, strict=True))
    found: dict[tuple[tuple[int, ...], ...], float] = {}
    tried: set[tuple[int, ...]] = set()

    def out_of_time() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    def try_cap(cap: float) -> float:
        counts = _cap_counts(loads, cap, limit, copies)
        if counts is None:
            return math.inf
        best = math.inf
        for largest in (True, False):
            full = _add_copies(loads, counts, copies - sum(counts), limit, largest)
            if tuple(full) in tried:
                continue
            tried.add(tuple(full))
            placement = differencing_assign(loads, full, num_ranks, slots)
            if placement is None:
                continue
            worst = max(rank_loads(loads, placement))
            found.setdefault(tuple(tuple(p) for p in placement), worst)
            best = min(best, worst)
        return best

    if least_piece > 0.0:
        coarse: list[tuple[float, float]] = []
        cap = least_piece
        while not out_of_time():
            coarse.append((try_cap(cap), cap))
            if cap >= greedy_max:
                break
            cap = min(cap * SEARCH_COARSE_STEP, greedy_max)
        if coarse:
            centre = min(coarse)[1]
            cap = max(least_piece, centre / SEARCH_COARSE_STEP)
            while cap < centre * SEARCH_COARSE_STEP and cap <= greedy_max and not out_of_time():
                try_cap(cap)
                cap *= SEARCH_FINE_STEP
    ranked = [
        [list(p) for p in key]
        for key, _ in sorted(found.items(), key=lambda item: item[1])[:SEARCH_POLISHED]
    ]
    best_placement = min([greedy, *ranked[:1]], key=lambda p: max(rank_loads(loads, p)))
    best_max = max(rank_loads(loads, best_placement))
    for start in [*ranked, greedy]:
        if out_of_time():
            break
        polished = swap_local_search(loads, start, deadline=deadline)
        polished = replica_transfer_search(loads, polished, limit, deadline=deadline)
        worst = max(rank_loads(loads, polished))
        if worst < best_max:
            best_placement, best_max = polished, worst
    return [sorted(held) for held in best_placement]


def grouped_dual_search(
    loads: Sequence[float],
    num_ranks: int,
    ranks_per_node: int,
    num_redundant: int,
    num_groups: int,
    *,
    deadline: float | None = None,
) -> Placement | None:
    """`dual_search` under group-limited routing: the groups go to nodes, equal group counts
    per node, by `differencing_assign` on the group loads (balanced node loads); then every
    node is its own problem (its experts, its N ranks, its N·S − E/M redundant copies, at
    most N copies of an expert). Each group then sits on one node.

    Returns:
        rank_experts, or None when the groups do not split evenly over the nodes.
    """
    experts = len(loads)
    nodes = num_ranks // ranks_per_node
    if num_groups % nodes or experts % num_groups:
        return None
    size = experts // num_groups
    group_loads = [sum(loads[c * size : (c + 1) * size]) for c in range(num_groups)]
    node_groups = differencing_assign(group_loads, [1] * num_groups, nodes, num_groups // nodes)
    if node_groups is None:
        return None
    slots = (experts + num_redundant) // num_ranks
    placement: Placement = []
    for groups in node_groups:
        local = [e for c in groups for e in range(c * size, (c + 1) * size)]
        redundant = ranks_per_node * slots - len(local)
        if not 0 <= redundant <= len(local) * (ranks_per_node - 1):
            return None
        local_placement = dual_search(
            [loads[e] for e in local], ranks_per_node, redundant, deadline=deadline
        )
        placement.extend(sorted(local[i] for i in held) for held in local_placement)
    return placement
