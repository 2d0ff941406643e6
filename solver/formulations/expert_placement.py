r"""MoE expert placement with redundant experts: a CP-SAT program per layer.

Data (one layer): experts e = 0..E−1 with token loads w_e ≥ 0; ranks g = 0..G−1, N per node,
node ν(g) = g div N, nodes n = 0..M−1 (M = G/N); R redundant copies; S = (E+R)/G slots per
rank; optional groups γ(e) = e div (E/num_groups) that must each sit on one node. Expert e
gets r_e copies, each serving w_e/r_e tokens; at most one copy per rank, so
r_e ≤ K = min(G, 1+R) (min(N, 1+R) with groups). Loads are scaled to integers
q_{e,k} = round(σ·w_e/k) by one scale σ (see `_scale`: exact for integer token counts when
σ·lcm(1..K)·Σw fits `EXACT_SCALE_LIMIT`, else σ = LOAD_UNITS / max_e w_e).

Program (stage 1, minimise the busiest rank's load; stage 2, at that load, the traffic):

    variables  z[e,k] ∈ {0,1}    r_e = k, for k ∈ [lo_e, hi_e]   (r_e = Σ_k k·z[e,k])
               x[e,g] ∈ {0,1}    a copy of e sits on rank g
               p[e,g] ∈ ℤ≥0      tokens (scaled) rank g serves for e
               h[γ,n] ∈ {0,1}    group γ sits on node n (group-limited routing only)
    (a)  Σ_k z[e,k] = 1                                   one replica count per expert
    (b)  Σ_e (r_e − 1) = R                                exactly the redundant budget
    (c)  Σ_g x[e,g] = r_e                                 r_e copies on distinct ranks
    (d)  Σ_e x[e,g] = S                                   every slot of every rank is used
    (e)  p[e,g] = Σ_k q_{e,k}·z[e,k] if x[e,g] else 0     (the product, linearised by
                                                          enforcement: exact, no big-M error)
    (f)  L_g = Σ_e p[e,g] ≤ T
    (g)  x[e,g] ≤ h[γ(e), ν(g)],  Σ_n h[γ,n] = 1          each group on one node
    (h)  L_g ≥ L_{g+1} when ν(g) = ν(g+1)                 ranks of a node are interchangeable
    (i)  Σ_g L_g = Σ_e Σ_k k·q_{e,k}·z[e,k]               a valid cut (total load)
    (l)  Σ_k q_{e,k}·z[e,k] ≤ T                           a valid cut (every copy fits)
    stage 1: min T,  with LB ≤ T ≤ T_hint
    stage 2: T ≤ T*, max Σ (locally served tokens):
    (j)  uniform senders: u[e,n] ≤ Σ_{ν(g)=n} p[e,g],  u[e,n] ≤ σ·w_e·N/G;
         traffic = Σ_e σ·w_e − Σ u  (module docstring of `solver.placement_baselines`)
    (k)  coactivation (layer l ≥ 1, layer l−1 placed, node shares a_{i,n}):
         v[i,j,n] ≤ C_ij·a_{i,n},  σw_j·v[i,j,n] ≤ C_ij·Σ_{ν(g)=n} p[j,g];
         traffic = Σ C_ij − Σ v

Why the joint model and not "replica counts first, then assignment": choosing r by the
largest load/copies (EPLB) and then assigning exactly is not optimal for the joint problem
(a replica that the greedy spends on the hottest expert can be worth more on an expert that
packs better), and the brute-force tests compare against all replica vectors. The product
load/r_e·x is linearised through (e) with one integer Q_e = Σ_k q_{e,k} z[e,k] per expert
(E·G enforced equalities instead of E·G·K variables y[e,g,k]).

Domains: the best valid placement among the three baselines and the heuristic
`search_placement` (`solver.placement_baselines.dual_search`: a sweep over the largest piece,
differencing packing, swap and replica-transfer local search; never worse than greedy LPT)
hints the solve and bounds it, T ≤ T_hint; then r_e ≥ lo_e = min{k : q_{e,k} ≤ T_hint} (a
copy fits under T) and hi_e = min(K, 1 + R − Σ_{e'≠e}(lo_{e'} − 1)), both valid for every
solution with T ≤ T_hint. LB = max(⌈Σ_e min_k k·q_{e,k} / G⌉, the piece bound: the least c
with Σ_e min{k : q_{e,k} ≤ c} ≤ E + R, the crowding bound of `_crowding_bound`: at most
(j − 1)·G pieces above T/j, with groups `_group_bound`: a group's node carries it on N
ranks) and, without redundancy, the rank that holds e holds S − 1 others:
max_e (q_e + the S − 1 smallest other loads). The bounds in tokens (`_float_lower_bound`)
enter the scaled program as ⌈σ·LB − S/2⌉ (⌈σ·LB⌉ when the scaling is exact).

Exact for the scaled model: stage-1 status OPTIMAL means T* is the optimum of the scaled
program; the answer reports gap = (T − bound)/T from CP-SAT's best bound. Layers are
independent except through (k): with coactivation, layers are placed in order and layer l's
traffic is minimised given layer l−1's placement (greedy over layers, exact per layer).
When E·G exceeds `MAX_MODEL_CELLS` or the time is used up, the layer gets the best of the
baselines and the heuristic (status `feasible`, gap against LB; `method` names it). The
heuristic gets at most `SEARCH_SHARE` of the layer's time (`SEARCH_ALONE_SHARE` when CP-SAT
will not run), CP-SAT the rest but a margin (`CP_SAT_MARGIN_S`). The decoded placement is
re-evaluated in floats and checked against every constraint (`verify_placement`); a baseline
or heuristic placement that is better in floats (rounding) replaces it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ortools.sat.python import cp_model

from solver.base import SolveStatus
from solver.placement_baselines import (
    Placement,
    coactivation_traffic,
    dispatch_traffic,
    dual_search,
    eplb_hierarchical,
    greedy_lpt,
    grouped_dual_search,
    imbalance,
    rank_loads,
    replica_counts,
    round_robin,
    verify_placement,
)
from specs.errors import InfeasiblePlan, SolverTimeout
from specs.placement import ExpertPlacementRequest

LOAD_UNITS = 1 << 20
"""Scaled load of the hottest expert when loads are not scaled exactly (resolution 1e-6)."""
EXACT_SCALE_LIMIT = 1 << 40
"""Largest σ·lcm(1..K)·Σw for which integer loads are scaled exactly by lcm(1..K)."""
TRAFFIC_UNITS = 1 << 16
"""Scaled coactivation count of the largest entry (stage 2, coactivation)."""
CROWDING_MAX_PARTS = 4
"""Largest j of `_crowding_bound` (at most (j − 1)·G pieces above t/j)."""
CROWDING_TABLE_LIMIT = 100_000
"""Knapsack table cells above which `_crowding_feasible` does not run the exact programme."""
MAX_MODEL_CELLS = 262_144
"""Experts × ranks above which a layer gets the best of the baselines and the heuristic
instead of CP-SAT."""
MAX_TRAFFIC_TERMS = 200_000
"""Variables of stage 2 above which the traffic is not optimised (only reported)."""
STAGE1_SHARE = 0.75
"""Share of a layer's time for stage 1 when stage 2 runs."""
DEFAULT_NUM_WORKERS = 8
"""CP-SAT's portfolio (LNS workers find much better placements than one search worker);
one worker with a fixed seed is deterministic when the solve ends before its limit."""
DEFAULT_RANDOM_SEED = 0
SEARCH_SHARE = 0.3
"""Largest share of a layer's time for `search_placement` (the rest is CP-SAT's)."""
CP_SAT_MARGIN_SHARE = 0.12
CP_SAT_MARGIN_S = 0.25
"""A layer's time kept back from CP-SAT: min(CP_SAT_MARGIN_S, CP_SAT_MARGIN_SHARE × its
time). CP-SAT overruns its limit by up to ~0.2 s (its workers check the clock between steps,
later when they outnumber the cores) and the answer is re-checked after it."""
SEARCH_ALONE_SHARE = 0.8
"""Its share when the layer is too large for CP-SAT (`MAX_MODEL_CELLS`)."""

BASELINES = ("round_robin", "greedy", "eplb")
_STATUS = {cp_model.OPTIMAL: SolveStatus.OPTIMAL, cp_model.FEASIBLE: SolveStatus.FEASIBLE}


@dataclass(frozen=True)
class LayerPlacement:
    """One layer's answer (the `layers[i]` of the API)."""

    rank_experts: Placement
    replicas: dict[str, int]
    rank_loads: list[float]
    imbalance: float
    cross_node_traffic: float
    status: SolveStatus
    gap: float
    lower_bound: float
    solve_time_s: float
    baselines: dict[str, float] = field(default_factory=dict)
    method: str = "cp_sat"
    """`cp_sat`, `search` (the heuristic) or the baseline that was returned (`greedy`, ...)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank_experts": self.rank_experts,
            "replicas": self.replicas,
            "rank_loads": self.rank_loads,
            "imbalance": self.imbalance,
            "cross_node_traffic": self.cross_node_traffic,
            "status": self.status.value,
            "gap": self.gap,
            "lower_bound": self.lower_bound,
            "solve_time_s": self.solve_time_s,
            "baselines": self.baselines,
            "method": self.method,
        }


@dataclass(frozen=True)
class PlacementResult:
    """Every layer's placement."""

    status: SolveStatus
    gap: float
    max_imbalance: float
    layers: list[LayerPlacement]
    solve_time_s: float
    traffic_model: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "gap": self.gap,
            "max_imbalance": self.max_imbalance,
            "layers": [layer.to_dict() for layer in self.layers],
            "solve_time_s": self.solve_time_s,
            "traffic_model": self.traffic_model,
        }


def baseline_placements(
    request: ExpertPlacementRequest, loads: Sequence[float]
) -> dict[str, Placement]:
    """The three baselines of `solver.placement_baselines` on one layer."""
    ranks, redundant = request.num_ranks, request.num_redundant
    return {
        "round_robin": round_robin(loads, ranks, redundant),
        "greedy": greedy_lpt(loads, ranks, redundant),
        "eplb": eplb_hierarchical(
            loads, ranks, request.ranks_per_node, redundant, request.num_groups
        ),
    }


def search_placement(
    request: ExpertPlacementRequest,
    loads: Sequence[float],
    deadline: float | None = None,
    greedy: Placement | None = None,
) -> Placement | None:
    """The heuristic of `solver.placement_baselines.dual_search` on one layer (per node with
    `grouped_dual_search` under group-limited routing; None when the groups do not split
    evenly over the nodes). Not a baseline: it hints CP-SAT and is the fallback answer.
    `greedy`: `greedy_lpt`'s placement of this layer when already computed."""
    if request.num_groups is not None:
        return grouped_dual_search(
            loads,
            request.num_ranks,
            request.ranks_per_node,
            request.num_redundant,
            request.num_groups,
            deadline=deadline,
        )
    return dual_search(
        loads, request.num_ranks, request.num_redundant, deadline=deadline, greedy=greedy
    )


def solve_expert_placement(
    request: ExpertPlacementRequest,
    *,
    num_workers: int = DEFAULT_NUM_WORKERS,
    random_seed: int = DEFAULT_RANDOM_SEED,
) -> PlacementResult:
    """Place every layer's experts (and redundant copies) on the ranks.

    Args:
        request: loads, ranks, redundancy, groups, coactivation, time limit (checked here).
        num_workers, random_seed: CP-SAT search workers and seed.
    Returns:
        PlacementResult; status `optimal` when every layer is proven optimal.
    Raises:
        SpecError: a cross-field rule of the request is broken.
        SolverTimeout: a layer has neither a CP-SAT solution nor a valid baseline in time.
    """
    request.check()
    start = time.monotonic()
    deadline = start + request.time_limit_s
    layers: list[LayerPlacement] = []
    previous: Placement | None = None
    for index, loads in enumerate(request.loads):
        remaining = max(0.0, deadline - time.monotonic())
        budget_s = remaining / (request.num_layers - index)
        coactivation = (
            request.coactivation[index - 1]
            if request.coactivation is not None and index > 0
            else None
        )
        layer = _solve_layer(
            request,
            loads,
            budget_s,
            previous,
            coactivation,
            num_workers=num_workers,
            random_seed=random_seed,
        )
        layers.append(layer)
        previous = layer.rank_experts
    all_optimal = all(layer.status is SolveStatus.OPTIMAL for layer in layers)
    return PlacementResult(
        status=SolveStatus.OPTIMAL if all_optimal else SolveStatus.FEASIBLE,
        gap=max(layer.gap for layer in layers),
        max_imbalance=max(layer.imbalance for layer in layers),
        layers=layers,
        solve_time_s=time.monotonic() - start,
        traffic_model="coactivation" if request.coactivation is not None else "uniform_senders",
    )


# ---- one layer ---------------------------------------------------------------------------
@dataclass
class _Layer:
    """The scaled data of one layer (see the module docstring)."""

    loads: Sequence[float]
    num_ranks: int
    ranks_per_node: int
    num_redundant: int
    num_groups: int | None
    scale: float
    """σ: scaled units per token."""
    q: list[dict[int, int]]
    """q[e][k] = round(σ·w_e/k) for k ∈ [lo_e, hi_e]."""
    lo: list[int]
    hi: list[int]
    float_bound: float = 0.0
    """A lower bound on the max rank load in tokens (`_float_lower_bound`)."""

    @property
    def slots(self) -> int:
        return (len(self.loads) + self.num_redundant) // self.num_ranks

    @property
    def num_nodes(self) -> int:
        return self.num_ranks // self.ranks_per_node


def _max_copies(request: ExpertPlacementRequest) -> int:
    per_rank_limit = request.ranks_per_node if request.num_groups is not None else request.num_ranks
    return min(per_rank_limit, 1 + request.num_redundant)


def _scale(loads: Sequence[float], max_copies: int) -> float:
    """σ: lcm(1..K) when the loads are integers and σ·Σw ≤ EXACT_SCALE_LIMIT (then every
    q_{e,k} = σ·w_e/k is exact), else LOAD_UNITS / max_e w_e (1 when all loads are 0)."""
    biggest = max(loads)
    if biggest <= 0.0:
        return 1.0
    lcm = math.lcm(*range(1, max_copies + 1))
    if all(float(w).is_integer() for w in loads) and lcm * sum(loads) <= EXACT_SCALE_LIMIT:
        return float(lcm)
    return LOAD_UNITS / biggest


def _scaled_max_load(layer: _Layer, placement: Placement) -> int:
    counts = replica_counts(placement, len(layer.loads))
    return max(
        sum(round(layer.scale * layer.loads[e] / counts[e]) for e in held) for held in placement
    )


def _valid(request: ExpertPlacementRequest, placement: Placement) -> bool:
    try:
        verify_placement(
            placement,
            num_experts=request.num_experts,
            num_redundant=request.num_redundant,
            ranks_per_node=request.ranks_per_node,
            num_groups=request.num_groups,
        )
    except AssertionError:
        return False
    return True


def _traffic(
    request: ExpertPlacementRequest,
    loads: Sequence[float],
    placement: Placement,
    previous: Placement | None,
    coactivation: Sequence[Sequence[float]] | None,
) -> float:
    if request.coactivation is not None:
        if previous is None or coactivation is None:
            return 0.0
        return coactivation_traffic(coactivation, previous, placement, request.ranks_per_node)
    return dispatch_traffic(loads, placement, request.ranks_per_node)


def _piece_bound(pieces: Sequence[Sequence[float]], copies: int) -> float:
    """The smallest piece size c such that every expert can be cut into pieces ≤ c with
    `copies` copies in all: the least c in the candidates with Σ_e min{k : piece_e(k) ≤ c}
    ≤ copies (bisection; the count needed never grows with c). `pieces[e]` lists expert e's
    piece for its allowed counts, increasing counts. Any placement's largest piece, hence its
    max rank load, is at least this.
    """
    candidates = sorted({v for row in pieces for v in row})

    def need(c: float) -> int:
        total = 0
        for row in pieces:
            k = next((i for i, v in enumerate(row) if v <= c), None)
            if k is None:
                return copies + 1
            total += k + 1
        return total

    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if need(candidates[mid]) <= copies:
            hi = mid
        else:
            lo = mid + 1
    return candidates[lo]


def _crowding_feasible(
    loads: Sequence[float], ranks: int, copies: int, max_copies: int, t: float, parts: int
) -> bool:
    """The necessary condition of `_crowding_bound` at max rank load t, j = `parts`.

    Every copy must fit (r_e ≥ m_e = max(1, ⌈w_e/t⌉) ≤ K) and the Σ r_e = E + R copies must
    leave at most (j − 1)·G pieces above t/j. An expert is "big" (its r_e pieces exceed t/j)
    iff r_e < l_e = ⌈j·w_e/t⌉, so it adds ≥ m_e big pieces at ≥ m_e copies, or none at
    ≥ l_e copies: the fewest big pieces within the E + R − Σ m_e spare copies is a 0/1
    knapsack (items: l_e − m_e copies save m_e big pieces). Decided by the greedy in ratio
    order (a feasible choice: enough saved means the condition holds), its LP relaxation (an
    upper bound on the saving: too little means it fails) and, between the two, the exact
    dynamic programme over the spare copies when its table has at most
    `CROWDING_TABLE_LIMIT` cells (else "holds", which keeps the condition necessary).
    Rounding in w_e/t is resolved towards "holds" as well.
    """
    base = big = 0
    items: list[tuple[int, int]] = []  # (extra copies to stop being big, big pieces saved)
    for w in loads:
        fewest = max(1, math.ceil(w / t * (1.0 - 1e-12)))
        if fewest > max_copies:
            return False
        small_from = max(1, math.ceil(parts * w / t * (1.0 - 1e-12)))
        base += fewest
        if small_from > fewest:
            big += fewest
            if small_from <= max_copies:
                items.append((small_from - fewest, fewest))
    spare = copies - base
    if spare < 0:
        return False
    need = big - (parts - 1) * ranks  # big pieces the spare copies must save
    if need <= 0:
        return True
    items = sorted(
        (item for item in items if item[0] <= spare), key=lambda item: (-item[1] / item[0], item[0])
    )
    whole = relaxed = 0.0
    left = fill = float(spare)
    for cost, value in items:
        if cost <= fill:
            whole += value
            fill -= cost
        take = min(1.0, left / cost)
        relaxed += take * value
        left -= take * cost
    if whole >= need:
        return True
    if relaxed < need - 1e-9:
        return False
    if len(items) * spare > CROWDING_TABLE_LIMIT:
        return True
    saved = [0] * (spare + 1)
    for cost, value in items:
        for budget in range(spare, cost - 1, -1):
            saved[budget] = max(saved[budget], saved[budget - cost] + value)
    return saved[spare] >= need


def _crowding_bound(
    loads: Sequence[float], ranks: int, copies: int, max_copies: int, slots: int, start: float
) -> float:
    r"""A lower bound on the max rank load from the pieces that cannot share a rank.

    Claim: if a placement has max rank load ≤ t then, for every j ≥ 2, at most (j − 1)·G of
    its pieces exceed t/j. Proof: j pieces > t/j on one rank would load it above t, so each
    of the G ranks holds at most j − 1 of them. With the replica-count facts of
    `_crowding_feasible` (a piece ≤ t, Σ r_e = E + R, r_e ≤ K) this is a condition on t
    alone, and it is monotone: counts that meet it at t meet it at any t' > t (pieces above
    t'/j are also above t/j). So bisection finds the largest t at which it fails; the optimum
    exceeds that t. j runs over 2..min(S, `CROWDING_MAX_PARTS`) (for j > S the condition
    always holds: there are only S·G pieces). This is the counting argument behind the
    classic bin-packing bounds on items larger than half the bin (e.g. Martello & Toth 1990,
    "Knapsack problems", §8.3, bound L2), applied to the replica pieces.

    Returns:
        max(start, the bound); `start` (a known bound) when the condition holds there.
    """
    best = start
    hi_all = max(sum(loads), start)
    for parts in range(2, min(slots, CROWDING_MAX_PARTS) + 1):
        if best <= 0.0 or _crowding_feasible(loads, ranks, copies, max_copies, best, parts):
            continue
        lo, hi = best, hi_all
        for _ in range(200):
            if hi - lo <= 1e-12 * hi:
                break
            mid = (lo + hi) / 2.0
            if _crowding_feasible(loads, ranks, copies, max_copies, mid, parts):
                hi = mid
            else:
                lo = mid
        best = max(best, lo)
    return best


def _float_lower_bound(request: ExpertPlacementRequest, loads: Sequence[float]) -> float:
    """`_plain_bound` of the layer and, with group-limited routing, `_group_bound`: any
    placement's max rank load is at least this."""
    bound = _plain_bound(loads, request.num_ranks, request.num_redundant, _max_copies(request))
    if request.num_groups is not None:
        bound = max(
            bound,
            _group_bound(
                loads,
                request.num_ranks,
                request.ranks_per_node,
                request.num_redundant,
                request.num_groups,
            ),
        )
    return bound


def _plain_bound(loads: Sequence[float], ranks: int, redundant: int, max_copies: int) -> float:
    """max(mean rank load, the piece bound of `_piece_bound`, `_crowding_bound`) and,
    without redundancy, max_e (w_e + the S − 1 smallest other loads), for E experts on
    `ranks` ranks with `redundant` extra copies, at most `max_copies` of an expert."""
    pieces = [[w / k for k in range(1, max_copies + 1)] for w in loads]
    copies = len(loads) + redundant
    slots = copies // ranks
    bound = max(sum(loads) / ranks, _piece_bound(pieces, copies))
    if redundant == 0 and slots > 1:
        ordered = sorted(loads)
        others = slots - 1
        for w in loads:
            smallest = ordered[: others + 1]
            rest = sum(smallest) - (w if w in smallest else smallest[-1])
            bound = max(bound, w + rest)
    return _crowding_bound(loads, ranks, copies, max_copies, slots, bound)


def _group_bound(
    loads: Sequence[float], ranks: int, ranks_per_node: int, redundant: int, groups: int
) -> float:
    """A lower bound on the max rank load from group-limited routing.

    Each group γ (s = E / groups experts, load W_γ) sits on one node, and a node holds at
    least c = ⌈S / s⌉ groups (its N·S slots take at most N copies of each of its experts).
    So the node of γ carries ≥ W_γ + the c − 1 smallest other group loads on N ranks: one of
    them carries ≥ that / N. And when s ≥ S, γ alone fills a node: any placement of a node
    holding γ and other groups, with the others' copies removed and the freed slots refilled
    by extra copies of γ's experts (each rank lacks ≥ as many of them as it has free slots,
    since s ≥ S; an extra copy only shrinks pieces), is a placement of γ alone on N ranks
    with N·S − s redundant copies that is no busier; so `_plain_bound` of that sub-problem
    bounds the max rank load too. The largest over the groups is returned.
    """
    size = len(loads) // groups
    slots = (len(loads) + redundant) // ranks
    per_group = [list(loads[c * size : (c + 1) * size]) for c in range(groups)]
    totals = sorted(sum(group) for group in per_group)
    least = -(-slots // size)
    bound = 0.0
    for group in per_group:
        load = sum(group)
        others = list(totals)
        others.remove(load)
        bound = max(bound, (load + sum(others[: least - 1])) / ranks_per_node)
        if size >= slots:
            alone = ranks_per_node * slots - size
            bound = max(
                bound, _plain_bound(group, ranks_per_node, alone, min(ranks_per_node, 1 + alone))
            )
    return bound


def _solve_layer(
    request: ExpertPlacementRequest,
    loads: Sequence[float],
    budget_s: float,
    previous: Placement | None,
    coactivation: Sequence[Sequence[float]] | None,
    *,
    num_workers: int,
    random_seed: int,
) -> LayerPlacement:
    started = time.monotonic()
    baselines = baseline_placements(request, loads)
    baseline_imbalance = {name: imbalance(rank_loads(loads, p)) for name, p in baselines.items()}
    valid = {name: p for name, p in baselines.items() if _valid(request, p)}
    float_bound = _float_lower_bound(request, loads)
    cells = request.num_experts * request.num_ranks
    share = SEARCH_SHARE if cells <= MAX_MODEL_CELLS else SEARCH_ALONE_SHARE
    searched = search_placement(request, loads, started + share * budget_s, baselines["greedy"])
    if searched is not None and _valid(request, searched):
        valid["search"] = searched

    def key(p: Placement) -> tuple[float, float]:
        return (max(rank_loads(loads, p)), _traffic(request, loads, p, previous, coactivation))

    best_name = min(valid, key=lambda n: key(valid[n])) if valid else None

    def answer(
        p: Placement, status: SolveStatus, gap: float, bound: float, method: str
    ) -> LayerPlacement:
        verify_placement(
            p,
            num_experts=request.num_experts,
            num_redundant=request.num_redundant,
            ranks_per_node=request.ranks_per_node,
            num_groups=request.num_groups,
        )
        per_rank = rank_loads(loads, p)
        counts = replica_counts(p, request.num_experts)
        return LayerPlacement(
            rank_experts=p,
            replicas={str(e): c for e, c in enumerate(counts) if c > 1},
            rank_loads=per_rank,
            imbalance=imbalance(per_rank),
            cross_node_traffic=_traffic(request, loads, p, previous, coactivation),
            status=status,
            gap=gap,
            lower_bound=bound,
            solve_time_s=time.monotonic() - started,
            baselines=baseline_imbalance,
            method=method,
        )

    def fallback() -> LayerPlacement:
        if best_name is None:
            raise SolverTimeout(
                "no placement found within the time limit; raise time_limit_s",
                time_limit_s=request.time_limit_s,
            )
        p = valid[best_name]
        worst = max(rank_loads(loads, p))
        gap = (worst - float_bound) / worst if worst > 0 else 0.0
        return answer(p, SolveStatus.FEASIBLE, max(0.0, gap), float_bound, best_name)

    if cells > MAX_MODEL_CELLS or budget_s < 0.01:
        return fallback()

    hint = valid[best_name] if best_name is not None else None
    layer = _layer_data(request, loads, hint, float_bound)
    cp_sat_deadline = started + budget_s - min(CP_SAT_MARGIN_S, CP_SAT_MARGIN_SHARE * budget_s)
    solved = _run_cp_sat(
        layer,
        hint,
        cp_sat_deadline,
        previous,
        coactivation,
        num_workers=num_workers,
        random_seed=random_seed,
    )
    if solved is None:
        return fallback()
    placement, status, t_scaled, bound_scaled = solved
    gap = (t_scaled - bound_scaled) / t_scaled if t_scaled > 0 else 0.0
    slack = 0.0 if _exact_scale(layer) else layer.slots / 2.0
    bound = max(float_bound, (bound_scaled - slack) / layer.scale)
    chosen = answer(placement, status, max(0.0, gap), bound, "cp_sat")
    if best_name is not None:
        base = valid[best_name]
        if key(base) < (max(chosen.rank_loads), chosen.cross_node_traffic):
            # rounding made the scaled optimum worse in floats than a baseline
            return answer(base, SolveStatus.FEASIBLE, chosen.gap, bound, best_name)
    return chosen


def _layer_data(
    request: ExpertPlacementRequest,
    loads: Sequence[float],
    hint: Placement | None,
    float_bound: float = 0.0,
) -> _Layer:
    """Scale the loads and bound every replica count (module docstring, "Domains")."""
    max_copies = _max_copies(request)
    scale = _scale(loads, max_copies)
    layer = _Layer(
        loads=loads,
        num_ranks=request.num_ranks,
        ranks_per_node=request.ranks_per_node,
        num_redundant=request.num_redundant,
        num_groups=request.num_groups,
        scale=scale,
        q=[],
        lo=[],
        hi=[],
        float_bound=float_bound,
    )

    def q(e: int, k: int) -> int:
        return round(scale * loads[e] / k)

    upper = _scaled_max_load(layer, hint) if hint is not None else None
    lo = []
    for e in range(len(loads)):
        k = 1
        while upper is not None and k < max_copies and q(e, k) > upper:
            k += 1
        lo.append(k)
    spare = request.num_redundant - sum(k - 1 for k in lo)
    hi = [min(max_copies, k + spare) for k in lo]
    layer.lo, layer.hi = lo, hi
    layer.q = [{k: q(e, k) for k in range(lo[e], hi[e] + 1)} for e in range(len(loads))]
    return layer


def _scaled_lower_bound(layer: _Layer) -> int:
    """LB of the module docstring, in scaled units."""
    experts, ranks = len(layer.loads), layer.num_ranks
    total = sum(min(k * qk for k, qk in layer.q[e].items()) for e in range(experts))
    pieces = [[layer.q[e][k] for k in range(layer.lo[e], layer.hi[e] + 1)] for e in range(experts)]
    # `_piece_bound` on the pruned domains: counts below lo_e are excluded, so shift them
    copies = experts + layer.num_redundant - sum(k - 1 for k in layer.lo)
    bound = max(-(-total // ranks), int(_piece_bound(pieces, copies)))
    if layer.num_redundant == 0 and layer.slots > 1:
        single = [layer.q[e][1] for e in range(experts)]
        ordered = sorted(single)
        for w in single:
            smallest = ordered[: layer.slots]
            rest = sum(smallest) - (w if w in smallest else smallest[-1])
            bound = max(bound, w + rest)
    # the float bound in scaled units: a rank's scaled load is σ·L exactly when the scaling
    # is exact, else ≥ σ·L − S/2 (each of its S pieces rounds by ≤ 1/2)
    slack = 0.0 if _exact_scale(layer) else layer.slots / 2.0
    return max(bound, math.ceil(layer.scale * layer.float_bound * (1.0 - 1e-12) - slack))


def _exact_scale(layer: _Layer) -> bool:
    """σ·w_e/k is an integer for every count k ≤ max hi_e: integer loads and an integer σ
    that lcm(1..max hi_e) divides (`_scale`'s exact case)."""
    if layer.scale != float(round(layer.scale)) or not all(
        float(w).is_integer() for w in layer.loads
    ):
        return False
    return round(layer.scale) % math.lcm(*range(1, max(layer.hi, default=1) + 1)) == 0


def _run_cp_sat(
    layer: _Layer,
    hint: Placement | None,
    deadline: float,
    previous: Placement | None,
    coactivation: Sequence[Sequence[float]] | None,
    *,
    num_workers: int,
    random_seed: int,
) -> tuple[Placement, SolveStatus, int, int] | None:
    """Stage 1 then (when traffic can change) stage 2, both ending by `deadline`
    (time.monotonic()); None without a stage-1 solution."""
    experts, ranks, per_node = len(layer.loads), layer.num_ranks, layer.ranks_per_node
    model = cp_model.CpModel()
    # z[e, k] == 1 iff expert e has k copies (only for experts whose count is not fixed)
    z = {
        (e, k): model.new_bool_var(f"z_{e}_{k}")
        for e in range(experts)
        if layer.hi[e] > layer.lo[e]
        for k in range(layer.lo[e], layer.hi[e] + 1)
    }
    # x[e, g] == 1 iff a copy of expert e sits on rank g
    x = {(e, g): model.new_bool_var(f"x_{e}_{g}") for e in range(experts) for g in range(ranks)}
    lower = _scaled_lower_bound(layer)
    upper = (
        _scaled_max_load(layer, hint)
        if hint is not None
        else sum(max(qe.values()) for qe in layer.q)
    )
    t = model.new_int_var(min(lower, upper), upper, "T")
    copies: list[Any] = []
    per_copy: list[Any] = []
    copy_total: list[Any] = []
    for e in range(experts):
        ks = range(layer.lo[e], layer.hi[e] + 1)
        if layer.hi[e] == layer.lo[e]:
            copies.append(layer.lo[e])
            per_copy.append(layer.q[e][layer.lo[e]])
            copy_total.append(layer.lo[e] * layer.q[e][layer.lo[e]])
            continue
        model.add_exactly_one(z[e, k] for k in ks).with_name(f"a_one_count_{e}")  # (a)
        copies.append(sum(k * z[e, k] for k in ks))
        q_e = model.new_int_var(min(layer.q[e].values()), max(layer.q[e].values()), f"Q_{e}")
        model.add(q_e == sum(layer.q[e][k] * z[e, k] for k in ks)).with_name(f"Q_def_{e}")
        per_copy.append(q_e)
        model.add(q_e <= t).with_name(f"l_piece_{e}")  # (l)
        copy_total.append(sum(k * layer.q[e][k] * z[e, k] for k in ks))
    model.add(sum(copies) - experts == layer.num_redundant).with_name("b_redundant")  # (b)
    for e in range(experts):  # (c)
        model.add(sum(x[e, g] for g in range(ranks)) == copies[e]).with_name(f"c_copies_{e}")
    for g in range(ranks):  # (d)
        model.add(sum(x[e, g] for e in range(experts)) == layer.slots).with_name(f"d_slots_{g}")
    # served[e, g]: scaled tokens rank g serves for e; p[e, g] when the count is a variable
    served: dict[tuple[int, int], Any] = {}
    for e in range(experts):
        for g in range(ranks):
            if isinstance(per_copy[e], int):
                served[e, g] = per_copy[e] * x[e, g]
                continue
            p = model.new_int_var(0, max(layer.q[e].values()), f"p_{e}_{g}")
            model.add(p == per_copy[e]).with_name(f"e_on_{e}_{g}").only_enforce_if(x[e, g])  # (e)
            model.add(p == 0).with_name(f"e_off_{e}_{g}").only_enforce_if(~x[e, g])
            served[e, g] = p
    rank_load = [sum(served[e, g] for e in range(experts)) for g in range(ranks)]
    for g in range(ranks):  # (f)
        model.add(rank_load[g] <= t).with_name(f"f_max_load_{g}")
    if layer.num_groups is not None:  # (g)
        size = experts // layer.num_groups
        nodes = layer.num_nodes
        h = {
            (c, n): model.new_bool_var(f"h_{c}_{n}")
            for c in range(layer.num_groups)
            for n in range(nodes)
        }
        for c in range(layer.num_groups):
            model.add_exactly_one(h[c, n] for n in range(nodes)).with_name(f"g_group_{c}")
        for (e, g), var in x.items():
            model.add_implication(var, h[e // size, g // per_node])
    for g in range(ranks - 1):  # (h)
        if g // per_node == (g + 1) // per_node:
            model.add(rank_load[g] >= rank_load[g + 1]).with_name(f"h_sym_{g}")
    model.add(sum(rank_load) == sum(copy_total)).with_name("i_total_load")  # (i)
    if hint is not None:
        _add_hint(model, layer, hint, x, z)
    model.minimize(t)

    traffic_terms = _traffic_terms(layer, previous, coactivation)
    stage2 = traffic_terms is not None and 0 < traffic_terms <= MAX_TRAFFIC_TERMS
    if hint is not None and upper <= lower and not stage2:
        return hint, SolveStatus.OPTIMAL, upper, upper  # the hint meets LB: proven optimal
    budget_s = deadline - time.monotonic()
    solver = _solver(budget_s * (STAGE1_SHARE if stage2 else 1.0), num_workers, random_seed)
    code = solver.solve(model)
    if code not in _STATUS:
        if code == cp_model.INFEASIBLE:
            raise InfeasiblePlan("placement", "no placement satisfies the constraints")
        return None
    status = _STATUS[code]
    t_best = round(solver.objective_value)
    bound_best = int(math.ceil(solver.best_objective_bound - 1e-9))
    placement = _decode(solver, x, experts, ranks)
    if not stage2:
        return placement, status, t_best, min(bound_best, t_best)

    # stage 2: keep T at its best value, maximise the tokens served on their own node
    model.add(t <= t_best).with_name("stage2_keep_T")
    local = _add_traffic_objective(model, layer, served, x, previous, coactivation)
    model.clear_hints()  # type: ignore[no-untyped-call]
    _add_hint(model, layer, placement, x, z)
    model.maximize(local)
    remaining = max(0.05, deadline - time.monotonic())
    solver2 = _solver(remaining, num_workers, random_seed)
    code2 = solver2.solve(model)
    if code2 in _STATUS:
        placement = _decode(solver2, x, experts, ranks)
        if code2 != cp_model.OPTIMAL:
            status = SolveStatus.FEASIBLE
    else:
        status = SolveStatus.FEASIBLE
    return placement, status, t_best, min(bound_best, t_best)


def _solver(time_s: float, num_workers: int, random_seed: int) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_s)
    solver.parameters.num_workers = num_workers
    solver.parameters.random_seed = random_seed
    return solver


def _add_hint(
    model: cp_model.CpModel,
    layer: _Layer,
    placement: Placement,
    x: dict[tuple[int, int], Any],
    z: dict[tuple[int, int], Any],
) -> None:
    """Hint `placement`, its ranks reordered inside each node by decreasing scaled load so
    that it satisfies the symmetry breaking (h)."""
    counts = replica_counts(placement, len(layer.loads))
    per_node = layer.ranks_per_node
    loads = [sum(layer.q[e].get(counts[e], 0) for e in held) for held in placement]
    ordered: Placement = []
    for start in range(0, layer.num_ranks, per_node):
        ranks = sorted(range(start, start + per_node), key=lambda g: (-loads[g], g))
        ordered.extend(placement[g] for g in ranks)
    held = {(e, g) for g, experts in enumerate(ordered) for e in experts}
    for (e, g), var in x.items():
        model.add_hint(var, (e, g) in held)
    for (e, k), var in z.items():
        model.add_hint(var, counts[e] == k)


def _decode(
    solver: cp_model.CpSolver, x: dict[tuple[int, int], Any], experts: int, ranks: int
) -> Placement:
    return [[e for e in range(experts) if solver.boolean_value(x[e, g])] for g in range(ranks)]


def _traffic_terms(
    layer: _Layer, previous: Placement | None, coactivation: Sequence[Sequence[float]] | None
) -> int | None:
    """Stage-2 variables, or None when the traffic cannot depend on the placement."""
    nodes = layer.num_nodes
    if nodes == 1 or layer.num_groups is not None and coactivation is None:
        return None  # one node; or every copy of an expert on one node: D_e is constant
    if coactivation is not None:
        if previous is None:
            return None
        return sum(1 for row in coactivation for c in row if c > 0) * nodes
    multi = sum(1 for e in range(len(layer.loads)) if layer.hi[e] >= 2)
    return multi * nodes if multi else None


def _add_traffic_objective(
    model: cp_model.CpModel,
    layer: _Layer,
    served: dict[tuple[int, int], Any],
    x: dict[tuple[int, int], Any],
    previous: Placement | None,
    coactivation: Sequence[Sequence[float]] | None,
) -> Any:
    """Constraints (j) or (k); returns the scaled locally served tokens to maximise."""
    experts, per_node, nodes = len(layer.loads), layer.ranks_per_node, layer.num_nodes

    def on_node(e: int, n: int) -> Any:
        return sum(served[e, g] for g in range(n * per_node, (n + 1) * per_node))

    terms: list[Any] = []
    if coactivation is None:
        for e in range(experts):  # (j)
            if layer.hi[e] < 2:
                continue
            cap = math.floor(layer.scale * layer.loads[e] * per_node / layer.num_ranks)
            for n in range(nodes):
                u = model.new_int_var(0, cap, f"u_{e}_{n}")
                model.add(u <= on_node(e, n)).with_name(f"j_local_{e}_{n}")
                terms.append(u)
        return sum(terms)
    assert previous is not None
    biggest = max(c for row in coactivation for c in row)
    shares: list[dict[int, float]] = [{} for _ in range(experts)]
    prev_counts = replica_counts(previous, experts)
    for g, held in enumerate(previous):
        for i in held:
            shares[i][g // per_node] = shares[i].get(g // per_node, 0.0) + 1.0 / prev_counts[i]
    for i, row in enumerate(coactivation):  # (k)
        for j, count in enumerate(row):
            if count <= 0.0:
                continue
            c_ij = round(TRAFFIC_UNITS * count / biggest)
            w_j = round(layer.scale * layer.loads[j])
            for n, a in shares[i].items():
                v = model.new_int_var(0, math.floor(c_ij * a + 1e-9), f"v_{i}_{j}_{n}")
                if w_j > 0:
                    model.add(w_j * v <= c_ij * on_node(j, n)).with_name(f"k_share_{i}_{j}_{n}")
                else:  # no load to split: bound by the copy count (share ≤ copies on n)
                    nodes_x = sum(x[j, g] for g in range(n * per_node, (n + 1) * per_node))
                    model.add(v <= c_ij * nodes_x).with_name(f"k_count_{i}_{j}_{n}")
                terms.append(v)
    return sum(terms)
