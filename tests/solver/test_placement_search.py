"""The placement heuristic (`dual_search`: piece-cap sweep, differencing packing, swap and
replica-transfer local search) and the crowding lower bound: validity on random instances
(with and without groups), never worse than greedy LPT, hand-derived small cases, brute-force
optima, and a skewed redundancy case where it beats greedy."""

from __future__ import annotations

import random

import pytest

import solver.formulations.expert_placement as placement_module
from bench.moe_placement import zipf_loads
from solver.base import SolveStatus
from solver.formulations.expert_placement import (
    _crowding_feasible,
    _float_lower_bound,
    search_placement,
    solve_expert_placement,
)
from solver.placement_baselines import (
    differencing_assign,
    dual_search,
    greedy_lpt,
    grouped_dual_search,
    rank_loads,
    replica_counts,
    replica_transfer_search,
    swap_local_search,
    verify_placement,
)
from specs.placement import ExpertPlacementRequest
from tests.solver.test_expert_placement import brute_force


def max_load(loads: list[float], placement: list[list[int]]) -> float:
    return max(rank_loads(loads, placement))


# ---- building blocks, hand-derived -------------------------------------------------------
def test_differencing_assign_hand_derived() -> None:
    # pieces 8..1 on 2 ranks × 4 slots: layers {8,7} {6,5} {4,3} {2,1}; merging heaviest with
    # lightest gives {8,5} {7,6}, then {4,1} {3,2}, then {8,5,4,1} and {7,6,3,2}: 18 and 18
    loads = [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    placement = differencing_assign(loads, [1] * 8, 2, 4)
    assert placement == [[0, 3, 4, 7], [1, 2, 5, 6]]
    assert rank_loads(loads, placement) == [18.0, 18.0]


def test_differencing_assign_keeps_copies_apart() -> None:
    # expert 0 has 3 copies of 4 on 3 ranks × 2 slots: its copies fill the first layer, and
    # the second layer (experts 1, 2, 3) must not put a copy of 0 twice on a rank
    loads = [12.0, 5.0, 3.0, 1.0]
    placement = differencing_assign(loads, [3, 1, 1, 1], 3, 2)
    assert placement is not None
    verify_placement(placement, num_experts=4, num_redundant=2, ranks_per_node=1)
    assert sorted(rank_loads(loads, placement)) == [5.0, 7.0, 9.0]


def test_swap_local_search_hand_derived() -> None:
    # ranks {5, 4} = 9 and {1, 0} = 1: exchanging 5 with 1 (or 4 with 0) gives 5 and 5
    loads = [5.0, 4.0, 1.0, 0.0]
    improved = swap_local_search(loads, [[0, 1], [2, 3]])
    assert sorted(rank_loads(loads, improved)) == [5.0, 5.0]
    verify_placement(improved, num_experts=4, num_redundant=0, ranks_per_node=1)


def test_replica_transfer_changes_the_counts_swaps_cannot() -> None:
    # loads 10, 4, 2 on 2 ranks × 2 slots, 1 redundant copy held by expert 1: {10, 2} and
    # {2, 2} = 12, 4; no exchange helps (expert 1 is on both ranks, and swapping 10 with 2
    # only mirrors the ranks). Moving the copy to expert 0 gives {5, 4} and {5, 2} = 9, the
    # optimum (10 on one copy leaves ≥ 10 on its rank; copies of 4 or 2 leave 10 + ≥ 1)
    loads = [10.0, 4.0, 2.0]
    start = [[0, 1], [1, 2]]
    assert max_load(loads, swap_local_search(loads, start)) == 12.0
    moved = replica_transfer_search(loads, start, 2)
    assert replica_counts(moved, 3) == [2, 1, 1]
    assert max_load(loads, moved) == 9.0
    best, _ = brute_force(loads, 2, 1, 1)
    assert best == 9.0


# ---- validity and never worse than greedy ------------------------------------------------
def random_instance(rng: random.Random) -> tuple[list[float], int, int, int]:
    """(loads, ranks, ranks per node, redundant) with (E + R) divisible by the ranks."""
    ranks = rng.choice([2, 3, 4, 6, 8, 16])
    per_node = rng.choice([d for d in (1, 2, 4, 8) if ranks % d == 0])
    slots = rng.randint(1, 5)
    copies = ranks * slots
    experts = rng.randint(max(1, -(-copies // ranks)), copies)
    loads = zipf_loads(experts, rng.choice([0.0, 0.8, 1.4, 2.0]), 64 * experts, rng)
    if rng.random() < 0.2:
        loads[rng.randrange(experts)] = 0.0
    return loads, ranks, per_node, copies - experts


@pytest.mark.parametrize("seed", range(40))
def test_search_is_valid_and_never_worse_than_greedy(seed: int) -> None:
    rng = random.Random(seed)
    loads, ranks, per_node, redundant = random_instance(rng)
    experts = len(loads)
    placement = dual_search(loads, ranks, redundant)
    verify_placement(
        placement, num_experts=experts, num_redundant=redundant, ranks_per_node=per_node
    )
    greedy = greedy_lpt(loads, ranks, redundant)
    assert max_load(loads, placement) <= max_load(loads, greedy) * (1 + 1e-12)
    # the answer is a placement, so no lower bound may exceed it
    req = ExpertPlacementRequest(
        loads=[loads], num_ranks=ranks, ranks_per_node=per_node, num_redundant=redundant
    )
    assert _float_lower_bound(req, loads) <= max_load(loads, placement) * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_grouped_search_keeps_every_group_on_one_node(seed: int) -> None:
    rng = random.Random(100 + seed)
    nodes, per_node, slots = rng.choice([(2, 2, 3), (2, 4, 2), (4, 2, 2), (3, 2, 4)])
    ranks = nodes * per_node
    groups = nodes * rng.choice([1, 2])
    size = rng.choice(
        [
            s
            for s in (1, 2, 3, 4)
            if groups * s <= ranks * slots and per_node * slots <= (groups // nodes) * s * per_node
        ]
    )
    experts = groups * size
    redundant = ranks * slots - experts
    loads = zipf_loads(experts, 1.2, 100 * experts, rng)
    req = ExpertPlacementRequest(
        loads=[loads],
        num_ranks=ranks,
        ranks_per_node=per_node,
        num_redundant=redundant,
        num_groups=groups,
    ).check()
    placement = grouped_dual_search(loads, ranks, per_node, redundant, groups)
    assert placement is not None
    verify_placement(
        placement,
        num_experts=experts,
        num_redundant=redundant,
        ranks_per_node=per_node,
        num_groups=groups,
    )
    assert search_placement(req, loads) == placement


def test_grouped_search_declines_uneven_groups() -> None:
    # 3 groups on 2 nodes: a node holds 1 or 2 groups, which the per-node split cannot
    # express; the request itself is valid (the CP-SAT program handles it)
    loads = [float(w) for w in (9, 1, 4, 4, 2, 2)]
    req = ExpertPlacementRequest(
        loads=[loads], num_ranks=4, ranks_per_node=2, num_redundant=2, num_groups=3
    ).check()
    assert grouped_dual_search(loads, 4, 2, 2, 3) is None
    assert search_placement(req, loads) is None
    layer = solve_expert_placement(req, num_workers=1, random_seed=0).layers[0]
    verify_placement(
        layer.rank_experts, num_experts=6, num_redundant=2, ranks_per_node=2, num_groups=3
    )


# ---- quality -----------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_skewed_redundancy_beats_greedy(seed: int) -> None:
    # Zipf 1.4 over 128 experts, 32 ranks, 32 redundant copies (S = 5): greedy spends the
    # copies on the hottest expert and then has to put two big pieces on one rank
    loads = zipf_loads(128, 1.4, 128 * 512, random.Random(seed))
    greedy = max_load(loads, greedy_lpt(loads, 32, 32))
    ours = max_load(loads, dual_search(loads, 32, 32))
    mean = sum(loads) / 32
    assert ours < greedy * (1 - 0.05), (ours / mean, greedy / mean)
    assert ours < mean * 1.01  # within 1% of the mean-load bound


def test_solver_answers_the_search_placement_when_it_is_better() -> None:
    loads = zipf_loads(128, 1.4, 128 * 512, random.Random(7))
    req = ExpertPlacementRequest(
        loads=[loads], num_ranks=32, ranks_per_node=8, num_redundant=32, time_limit_s=2.0
    )
    layer = solve_expert_placement(req, num_workers=1, random_seed=0).layers[0]
    ours = max(layer.rank_loads)
    assert ours < layer.baselines["greedy"] * sum(loads) / 32 * (1 - 0.05)
    assert layer.lower_bound <= ours
    assert layer.gap == pytest.approx((ours - layer.lower_bound) / ours, abs=1e-9)


SMALL = [  # (experts, ranks, ranks_per_node, redundant, skew, seed)
    (5, 3, 1, 1, 1.4, 1),
    (6, 4, 2, 2, 1.4, 2),
    (6, 2, 1, 2, 1.0, 3),
    (4, 3, 1, 2, 2.0, 4),
    (6, 4, 1, 2, 1.4, 5),
    (5, 5, 1, 5, 1.4, 6),
]


@pytest.mark.parametrize(("experts", "ranks", "per_node", "redundant", "skew", "seed"), SMALL)
def test_search_plus_cp_sat_reach_the_brute_force_optimum(
    experts: int, ranks: int, per_node: int, redundant: int, skew: float, seed: int
) -> None:
    loads = zipf_loads(experts, skew, 60 * experts, random.Random(seed))
    best, _ = brute_force(loads, ranks, per_node, redundant)
    searched = dual_search(loads, ranks, redundant)
    assert max_load(loads, searched) >= best * (1 - 1e-12)  # no placement beats the optimum
    req = ExpertPlacementRequest(
        loads=[loads],
        num_ranks=ranks,
        ranks_per_node=per_node,
        num_redundant=redundant,
        time_limit_s=20.0,
    )
    result = solve_expert_placement(req, num_workers=1, random_seed=0)
    layer = result.layers[0]
    assert result.status is SolveStatus.OPTIMAL
    assert max(layer.rank_loads) == pytest.approx(best, rel=1e-9)
    assert layer.lower_bound == pytest.approx(best, rel=1e-9)


# ---- the crowding bound ------------------------------------------------------------------
def test_crowding_bound_hand_derived() -> None:
    # five experts of 6 on 3 ranks × 2 slots, 1 redundant copy: below a max load of 12 every
    # whole expert (6) is above half of it, and the one spare copy un-bigs one expert (3 + 3),
    # leaving 4 big pieces for 3 ranks. So ≥ 12, which {6, 6}, {6, 3}, {6, 3} reaches; the
    # mean (10) and the largest piece (6) are weaker
    loads = [6.0] * 5
    req = ExpertPlacementRequest(loads=[loads], num_ranks=3, ranks_per_node=1, num_redundant=1)
    assert _float_lower_bound(req, loads) == pytest.approx(12.0, rel=1e-9)
    best, _ = brute_force(loads, 3, 1, 1)
    assert best == 12.0
    layer = solve_expert_placement(req, num_workers=1, random_seed=0).layers[0]
    assert max(layer.rank_loads) == 12.0 and layer.gap == 0.0


def test_crowding_bound_without_redundancy_hand_derived() -> None:
    # 5, 5, 5, 1 on 2 ranks × 2 slots: two of the three 5s share a rank (10); the mean is 8
    # and the largest expert with its smallest partner is 6; at most G = 2 pieces above t/2
    # for t < 10 forces ≥ 10
    loads = [5.0, 5.0, 5.0, 1.0]
    req = ExpertPlacementRequest(loads=[loads], num_ranks=2, ranks_per_node=1)
    assert _float_lower_bound(req, loads) == pytest.approx(10.0, rel=1e-9)
    assert brute_force(loads, 2, 1, 0)[0] == 10.0


def test_crowding_condition_knapsack_hand_derived(monkeypatch: pytest.MonkeyPatch) -> None:
    # t = 10, j = 2 (pieces above 5 are big), 2 ranks: at most 2 big pieces. 32 needs ≥ 4
    # copies (8 each, big) and stops being big at 7 (4.57): 3 more copies save 4 big pieces;
    # each 22 needs 3 (7.33, big) and stops at 5 (4.4): 2 more save 3. 10 big pieces, so
    # 8 must be saved with 16 − 10 = 6 spare copies: the best is 32 and one 22 (5 copies,
    # 7 saved), so the condition fails. Ratio-order greedy saves 6 and the LP relaxation
    # 6 + 4·2/3 = 8.67, so only the exact knapsack decides it
    args = ([32.0, 22.0, 22.0], 2, 16, 8, 10.0, 2)
    assert _crowding_feasible(*args) is False
    # one more spare copy (7 of 17): all three stop being big (3 + 2 + 2), saving 10
    assert _crowding_feasible([32.0, 22.0, 22.0], 2, 17, 8, 10.0, 2) is True
    # a third rank allows 2 more big pieces: 6 to save, which the two 22s do with 4 copies
    assert _crowding_feasible([32.0, 22.0, 22.0], 3, 16, 8, 10.0, 2) is True
    # without the exact programme the undecided case counts as "holds" (still necessary)
    monkeypatch.setattr(placement_module, "CROWDING_TABLE_LIMIT", 0)
    assert _crowding_feasible(*args) is True


@pytest.mark.parametrize("seed", range(12))
def test_crowding_bound_never_exceeds_the_brute_force_optimum(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(500 + seed)
    experts, ranks, redundant = rng.choice(
        [(4, 2, 0), (5, 3, 1), (6, 2, 2), (3, 3, 3), (4, 3, 2), (6, 4, 2), (6, 3, 0)]
    )
    loads = zipf_loads(experts, rng.choice([0.5, 1.4, 2.5]), 40 * experts, rng)
    req = ExpertPlacementRequest(
        loads=[loads], num_ranks=ranks, ranks_per_node=1, num_redundant=redundant
    )
    best, _ = brute_force(loads, ranks, 1, redundant)
    exact = _float_lower_bound(req, loads)
    assert exact <= best * (1 + 1e-12)
    monkeypatch.setattr(placement_module, "CROWDING_TABLE_LIMIT", 0)
    assert _float_lower_bound(req, loads) <= exact * (1 + 1e-12)


def test_group_bound_hand_derived() -> None:
    # groups {6, 6} and {1, 1} on 2 nodes × 2 ranks × 2 slots (4 redundant): the node of the
    # first group carries 12 on 2 ranks, so ≥ 6 (which 3 + 3 on each rank reaches); the
    # mean (3.5) and the largest piece (3) are weaker
    loads = [6.0, 6.0, 1.0, 1.0]
    req = ExpertPlacementRequest(
        loads=[loads], num_ranks=4, ranks_per_node=2, num_redundant=4, num_groups=2
    )
    assert _float_lower_bound(req, loads) == pytest.approx(6.0, rel=1e-12)
    assert brute_force(loads, 4, 2, 4, groups=2)[0] == 6.0
    ungrouped = ExpertPlacementRequest(
        loads=[loads], num_ranks=4, ranks_per_node=2, num_redundant=4
    )
    assert _float_lower_bound(ungrouped, loads) < 6.0


@pytest.mark.parametrize("seed", range(10))
def test_group_bound_never_exceeds_the_brute_force_optimum(seed: int) -> None:
    rng = random.Random(900 + seed)
    experts, ranks, per_node, redundant, groups = rng.choice(
        [
            (4, 4, 2, 4, 2),
            (6, 4, 2, 2, 2),
            (4, 2, 1, 0, 2),
            (6, 4, 2, 2, 3),
            (8, 4, 2, 0, 4),
            (4, 4, 2, 0, 2),
        ]
    )
    loads = zipf_loads(experts, rng.choice([0.5, 1.4, 2.5]), 30 * experts, rng)
    req = ExpertPlacementRequest(
        loads=[loads],
        num_ranks=ranks,
        ranks_per_node=per_node,
        num_redundant=redundant,
        num_groups=groups,
    ).check()
    best, _ = brute_force(loads, ranks, per_node, redundant, groups=groups)
    assert _float_lower_bound(req, loads) <= best * (1 + 1e-12)
