"""Protocols of the analytical model's sub-models: the seams where a calibrated or measured
implementation can replace the roofline, alpha-beta or tensor-counting one."""

from __future__ import annotations

from typing import Protocol

from cost_models.analytical.placement import GroupPlacement, Tier


class GemmTimeModel(Protocol):
    """Achieved time of one GEMM on one GPU."""

    def time_s(self, m: float, k: float, n: float) -> float:
        """Seconds for (m×k)·(k×n)."""
        ...

    def forward_backward_s(self, m: float, k: float, n: float) -> tuple[float, float]:
        """(forward, backward) seconds of a linear layer with input (m×k), weight (k×n)."""
        ...


class AttentionTimeModel(Protocol):
    """Attention core (QKᵀ, softmax, AV) on one GPU, per micro-batch."""

    def forward_time_s(
        self,
        b: int,
        s: int,
        heads: float,
        qk_dim: int,
        v_dim: int,
        context: int,
        flash: bool,
        launches: int | None = None,
    ) -> float: ...

    def backward_time_s(
        self,
        b: int,
        s: int,
        heads: float,
        qk_dim: int,
        v_dim: int,
        context: int,
        flash: bool,
        launches: int | None = None,
    ) -> float: ...


class CollectiveTimeModel(Protocol):
    """Collective and point-to-point times (seconds) for an S-byte buffer on a group."""

    def all_reduce(self, size_bytes: float, group: GroupPlacement) -> float: ...

    def reduce_scatter(self, size_bytes: float, group: GroupPlacement) -> float: ...

    def all_gather(self, size_bytes: float, group: GroupPlacement) -> float: ...

    def send_recv(self, size_bytes: float, tier: Tier) -> float: ...
