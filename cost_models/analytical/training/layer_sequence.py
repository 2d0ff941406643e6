"""Per-layer records of a whole model under one set of degrees, shared by every plan that has
those degrees, with prefix sums built on first use."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

PREFIX_FIELDS = {
    "time": "total_s",
    "forward": "forward_s",
    "backward": "backward_s",
    "wgrad": "wgrad_s",
    "compute": "compute_s",
    "recompute": "recompute_s",
    "tp": "tp_s",
    "cp": "cp_s",
    "ep": "ep_s",
    "a2a": "a2a_s",
    "host": "host_s",
    "act": "activation_bytes",
    "params": "params",
    "expert_params": "expert_params",
    "shard_params": "shard_params",
    "weights": "weights_bytes",
    "grads": "grads_bytes",
    "optimizer": "optimizer_bytes",
}
"""Prefix-sum arrays evaluate() may ask for, and the per-layer record field of each."""

STATE_PREFIXES = frozenset(
    {"params", "expert_params", "shard_params", "weights", "grads", "optimizer"}
)
"""The prefix arrays read from a state sequence (the others from a cost sequence)."""


@dataclass(frozen=True, slots=True)
class TimeStats:
    total: float
    smallest: float
    largest: float


@dataclass(slots=True)
class LayerSeq:
    """Per-layer records of every layer (one cost or state record per layer) under one set
    of degrees, shared by every plan that has them. Prefix sums are built on first use (only
    evaluate() needs them), once per sequence rather than once per plan."""

    items: tuple[Any, ...]
    public: dict[str, tuple[float, ...]]
    """The LayerProfile tuples built from these records."""
    max_working_bytes: float
    """Largest `working_bytes` over layer kinds (cost sequences)."""
    max_params: float
    """Largest per-GPU parameter count over layer kinds (state sequences)."""
    params_sum: float
    """Σ_l params_l (state sequences), summed in layer order."""
    uniform: bool = False
    """Every layer has the same record (one layer kind)."""
    max_cp_working_bytes: float = 0.0
    """Largest transient context-parallel exchange bytes over layer kinds (cost
    sequences; `LayerCost.cp_working_bytes`)."""
    prefixes: dict[str, tuple[float, ...]] = field(default_factory=dict)
    _stats: TimeStats | None = None

    def stats(self) -> TimeStats:
        """Sum, smallest and largest per-layer time (cost sequences), computed once."""
        if self._stats is None:
            times = self.public["time"]
            self._stats = TimeStats(self.prefix("time")[-1], min(times), max(times))
        return self._stats

    def prefix(self, name: str) -> tuple[float, ...]:
        arr = self.prefixes.get(name)
        if arr is None:
            attr = PREFIX_FIELDS[name]
            items = self.items
            if self.uniform:  # one record repeated: read the field once
                values: Any = (getattr(items[0], attr),) * len(items)
            else:
                values = [getattr(x, attr) for x in items]
            arr = tuple(accumulate(values, initial=0.0))
            self.prefixes[name] = arr
        return arr


def per_layer(by_kind: dict[bool, Any], flags: tuple[bool, ...]) -> tuple[Any, ...]:
    """The per-layer tuple of a value given per layer kind (`(x,) * L` when uniform)."""
    if len(by_kind) == 1:
        (only,) = by_kind.values()
        return (only,) * len(flags)
    return tuple(by_kind[f] for f in flags)
