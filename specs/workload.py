"""Workload specs, a union discriminated on `kind` (training now; serving later)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from specs._base import Spec

Precision = Literal["bf16", "fp16", "fp8", "fp32"]


class TrainingWorkload(Spec):
    """Pre-training or fine-tuning with mixed-precision Adam."""

    kind: Literal["training"] = "training"
    global_batch_size: int = Field(ge=1, le=16_777_216)
    """Sequences per optimizer step."""
    sequence_length: int = Field(ge=1, le=4_194_304)
    """Tokens per sequence."""
    precision: Precision = "bf16"
    """Compute precision of the GEMMs (fp8 keeps bf16 weights, as Transformer Engine does)."""

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.sequence_length


Workload = Annotated[TrainingWorkload, Field(discriminator="kind")]
