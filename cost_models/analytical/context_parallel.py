"""Context-parallel attention exchange per layer and micro-batch on one GPU: the
communication of each algorithm of `specs.plan.ContextParallelAlgorithm`, what of it the
attention core hides, and the transient bytes it holds while attention runs.

Notation: c the context degree, t the tensor degree, n = b·s/c tokens a rank holds, a_t =
a/t query heads and g_t = g/t KV heads per tensor rank (MLA: g_t = a_t), d_qk / d_v the
head dimensions, bf16 (2 bytes) on the wire; x(S) is one send/recv of S bytes, A2A(S) /
AG(S) / RS(S) an all-to-all of an S-byte send buffer / all-gather to an S-byte output /
reduce-scatter of an S-byte input over the named group (`collectives.py`), ι the share of a
hidden transfer's time it still takes from the compute it overlaps (`Config.interference`),
and g(x, a) = max(0, x − a) + ι·min(x, a) the exposed time of a transfer x overlapped with
compute a.

- ring (Liu et al. 2023, Ring Attention; Megatron-Core `--cp-comm-type p2p`, Transformer
  Engine `AttnFuncWithCPAndKVP2P`): one K/V block B = n·g_t·(d_qk + d_v)·2 bytes moves one
  hop per step; step i's transfer overlaps step i's attention block (att / r of the core
  with load-balanced causal chunks: every step does the same work). Forward: r − 1
  transfers, exposed (r − 1)·g(x(B), att_f / r). Backward: K/V and their gradients travel
  together, 2(r − 1) blocks over r steps (step 0 sends K/V only, the last step dK/dV only,
  the steps between both): exposed 2·g(x(B), att_b / r) + (r − 2)·g(2·x(B), att_b / r).
  Its receive buffers (a few blocks, 4/r of the gathered K/V at most) are not charged.
- ulysses (Jacobs et al. 2023, DeepSpeed-Ulysses §3.1; Megatron-Core `a2a`, TE
  `AttnFuncWithCPAndQKVOA2A`): an all-to-all per Q, K and V turns the sequence split into a
  head split before the attention (every rank then holds the whole sequence for a_t / c
  heads) and one on the output turns it back: 4 all-to-alls of n·a_t·d_qk·2, n·g_t·d_qk·2,
  n·g_t·d_v·2 and n·a_t·d_v·2 bytes forward, the same four on the gradients backward
  (Jacobs et al.: 4Nh/P per link per layer for multi-head attention). They sit on the
  critical path (the attention needs their output): exposed in full. The re-split copies of
  Q, K, V and O exist beside the local ones while they are exchanged: that much transient
  memory. The stored activations are unchanged (s × a_t / c = s / c × a_t elements).
  Rule (TE asserts it): a_t and g_t divisible by the all-to-all degree.
- all_gather (Llama 3, Dubey et al. 2024 §3.3.2; Megatron-Core `allgather`, TE
  `AttnFuncWithCPAndKVAllGather`: "KV all-gather between CP ranks is exposed"): K and V of
  the whole sequence, S_K = b·s·g_t·d_qk·2 and S_V = b·s·g_t·d_v·2 bytes, are all-gathered
  before the two local chunks' attention; the backward gathers them again and
  reduce-scatters their gradients: forward AG(S_K) + AG(S_V), backward AG(S_K) + AG(S_V) +
  RS(S_K) + RS(S_V), none overlapped. Only the local K/V are saved for the backward; the
  backward holds the gathered K/V and their full-length gradients: 2·(S_K + S_V) transient
  bytes.
- hybrid (USP, Fang & Zhao 2024, arXiv 2405.07719 §3; LoongTrain's 2D attention, Gu et al.
  2024, arXiv 2406.18485 §3; Megatron-Core `a2a+p2p` with `--hierarchical-context-parallel-
  sizes u r`): Ulysses over head groups of u consecutive ranks (inside a node when they
  fit), then a ring over the r = c / u groups: the all-to-alls above over the head group,
  and the ring above with r steps over the ring group (its block holds u·n tokens of g_t / u
  KV heads: the same B bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cost_models.analytical.placement import GroupPlacement, Tier

BF16 = 2.0


class CollectiveTimeModel(Protocol):
    """What the exchanges need of a collective model (`ProblemContext.comm`)."""

    def all_to_all(
        self, size_bytes: float, group: GroupPlacement, off_node_share: float | None = None
    ) -> float: ...

    def all_gather(self, size_bytes: float, group: GroupPlacement) -> float: ...

    def reduce_scatter(self, size_bytes: float, group: GroupPlacement) -> float: ...

    def send_recv(self, size_bytes: float, tier: Tier) -> float: ...


@dataclass(frozen=True, slots=True)
class CPShape:
    """What the exchange of one layer depends on (per micro-batch, one GPU)."""

    tokens: float
    """n = b·s/c tokens the rank holds."""
    q_heads: float
    """a_t: query heads per tensor rank."""
    kv_heads: float
    """g_t: K/V heads per tensor rank (MLA: the query heads)."""
    qk_dim: int
    v_dim: int
    context: int

    @property
    def block_bytes(self) -> float:
        """One ring block: K and V of the rank's tokens, n·g_t·(d_qk + d_v)·2."""
        return self.tokens * self.kv_heads * (self.qk_dim + self.v_dim) * BF16

    def a2a_bytes(self) -> tuple[float, float, float, float]:
        """The four all-to-all send buffers per rank: Q, K, V, O."""
        n = self.tokens
        return (
            n * self.q_heads * self.qk_dim * BF16,
            n * self.kv_heads * self.qk_dim * BF16,
            n * self.kv_heads * self.v_dim * BF16,
            n * self.q_heads * self.v_dim * BF16,
        )

    def gathered_bytes(self) -> tuple[float, float]:
        """S_K, S_V: the whole sequence's K and V on one tensor rank."""
        full = self.tokens * self.context
        return full * self.kv_heads * self.qk_dim * BF16, full * self.kv_heads * self.v_dim * BF16


@dataclass(frozen=True, slots=True)
class CPExchange:
    """The exchange of one layer per micro-batch: exposed and wire times, seconds."""

    forward_s: float
    """Exposed forward communication."""
    backward_s: float
    """Exposed backward communication."""
    wire_forward_s: float
    """Forward communication before overlap."""
    wire_backward_s: float
    working_bytes: float = 0.0
    """Transient bytes while the attention runs (module docstring)."""
    ring_steps: int = 1
    """Attention steps per direction (the ring's degree; 1 without a ring)."""


def exposed(transfer_s: float, compute_s: float, interference: float) -> float:
    """g(x, a): a transfer overlapped with compute; what outlasts the compute, plus the
    share ι of the hidden part that still slows the compute."""
    return max(0.0, transfer_s - compute_s) + interference * min(transfer_s, compute_s)


def ring_exchange(
    comm: CollectiveTimeModel,
    shape: CPShape,
    ring: GroupPlacement,
    attention_forward_s: float,
    attention_backward_s: float,
    interference: float,
) -> CPExchange:
    """The ring over `ring` (module docstring): r − 1 overlapped block transfers forward,
    2(r − 1) over r steps backward."""
    r = ring.size
    if r <= 1:
        return CPExchange(0.0, 0.0, 0.0, 0.0)
    x = comm.send_recv(shape.block_bytes, ring.tier)
    a_f, a_b = attention_forward_s / r, attention_backward_s / r
    fwd = (r - 1) * exposed(x, a_f, interference)
    bwd = 2 * exposed(x, a_b, interference) + (r - 2) * exposed(2 * x, a_b, interference)
    return CPExchange(fwd, bwd, (r - 1) * x, 2 * (r - 1) * x, 0.0, r)


def ulysses_exchange(
    comm: CollectiveTimeModel, shape: CPShape, heads: GroupPlacement
) -> CPExchange:
    """Four all-to-alls each way over the head group, exposed (module docstring)."""
    if heads.size <= 1:
        return CPExchange(0.0, 0.0, 0.0, 0.0)
    sizes = shape.a2a_bytes()
    t = sum(comm.all_to_all(size, heads) for size in sizes)
    return CPExchange(t, t, t, t, sum(sizes))


def all_gather_exchange(
    comm: CollectiveTimeModel, shape: CPShape, group: GroupPlacement
) -> CPExchange:
    """K/V all-gathered forward, again backward with their gradients reduce-scattered;
    nothing overlapped (module docstring)."""
    if group.size <= 1:
        return CPExchange(0.0, 0.0, 0.0, 0.0)
    s_k, s_v = shape.gathered_bytes()
    gather = comm.all_gather(s_k, group) + comm.all_gather(s_v, group)
    scatter = comm.reduce_scatter(s_k, group) + comm.reduce_scatter(s_v, group)
    return CPExchange(gather, gather + scatter, gather, gather + scatter, 2 * (s_k + s_v))


def hybrid_exchange(
    comm: CollectiveTimeModel,
    shape: CPShape,
    heads: GroupPlacement,
    ring: GroupPlacement,
    attention_forward_s: float,
    attention_backward_s: float,
    interference: float,
) -> CPExchange:
    """Ulysses over `heads`, then the ring over `ring` (module docstring)."""
    a2a = ulysses_exchange(comm, shape, heads)
    rng = ring_exchange(comm, shape, ring, attention_forward_s, attention_backward_s, interference)
    return CPExchange(
        a2a.forward_s + rng.forward_s,
        a2a.backward_s + rng.backward_s,
        a2a.wire_forward_s + rng.wire_forward_s,
        a2a.wire_backward_s + rng.wire_backward_s,
        a2a.working_bytes + rng.working_bytes,
        rng.ring_steps,
    )


def attention_launches(algorithm: str, context: int, heads: int) -> int:
    """Attention-core kernels one forward launches: two per ring step with load-balanced
    causal chunks (TE CP), two for the all-gather's two local chunks, one for Ulysses (and
    for the bounds' "" of no exchange)."""
    if context <= 1 or algorithm in ("ulysses", ""):
        return 1
    if algorithm == "all_gather":
        return 2
    ring = context // heads if algorithm == "hybrid" else context
    return 2 * ring if ring > 1 else 1


def attention_steps(algorithm: str, context: int, heads: int) -> int:
    """Attention steps per direction (each backward step runs FlashAttention-2's three
    backward kernels): the ring's degree, 2 chunks for the all-gather, 1 for Ulysses."""
    if context <= 1 or algorithm in ("ulysses", ""):
        return 1
    if algorithm == "all_gather":
        return 2
    return context // heads if algorithm == "hybrid" else context


def comm_launches(algorithm: str, context: int) -> tuple[int, int]:
    """Collective kernels (forward, backward) of the exchange (the ring's send/recv pairs
    are counted with its attention steps)."""
    if context <= 1:
        return 0, 0
    if algorithm in ("ulysses", "hybrid"):
        return 4, 4
    if algorithm == "all_gather":
        return 2, 4
    return 0, 0
