"""FP8 training recipes: what runs in FP8, what quantising costs, and what it keeps in memory.

Transformer Engine runs every transformer-layer linear (QKV, attention output projection,
FC1 / gate-up, FC2 / down, expert and shared-expert linears) in FP8 — forward (fprop), data
gradient (dgrad) and weight gradient (wgrad); the attention core, the router, the embedding
and the LM head stay in BF16 (TE "Introduction" docs; Megatron-Core `fp8_dot_product_
attention` and `fp8_output_proj` default off; DeepSeek-V3, arXiv 2412.19437 §3.3, keeps the
embedding, output head, gating, norms and attention in BF16/FP32). Sources of every figure:
docs/research/compute.md §3.

Recipes (`TrainingWorkload.fp8_recipe`, Megatron-Core `--fp8-recipe`):

| recipe | scales | quantising a BF16 tensor for both GEMM layouts |
|---|---|---|
| `delayed` | one FP32 scale per tensor from the amax history | one pass: read 2 B, write the FP8 copies |
| `tensorwise` (current scaling) | one scale per tensor from this step's amax | an amax pass (read 2 B) before the cast pass |
| `blockwise` | 1×128 activation / gradient tiles, 128×128 weight blocks (DeepSeek-V3) | row- and column-wise copies quantised separately from BF16 |
| `mxfp8` | one E8M0 scale per 32 elements (OCP MX) | two quantisations (row and column scale directions differ) |

Layouts: Hopper FP8 GEMMs take only the TN layout, so every quantised tensor is also written
transposed for the dgrad / wgrad GEMMs (TE fuses cast and transpose); Blackwell (and CDNA4)
take every layout, so per-tensor scaling writes one copy, while MXFP8 still needs a row-wise
and a column-wise quantisation. Bytes per element of one quantisation (read BF16 + write
FP8, derived from torchao's roofline model, `roofline_utils.py`): delayed 2 + 1 per copy,
tensorwise + 2 for the amax pass, blockwise and MXFP8 2 × (2 + 1) + scales (1/32 B per
element for MX, 4/128 for 1×128 FP32 scales). TE's LayerNormLinear writes the quantised norm
output from the norm kernel itself, so the QKV and FC1 inputs cost only the FP8 writes.
Weights are quantised once per step (TE caches the FP8 weights across the step's
micro-batches, `is_first_microbatch`).

Memory (TE "Performance considerations"): the FP8 weight copies stay resident next to the
BF16 weights (Hopper: the copy and its transpose, +2 B/param; Blackwell per-tensor: +1 B;
MXFP8: row- and column-wise, +2 B plus scales) unless the framework keeps FP8 primary weights
(`fp8_param_gather`: 1 B/param, +1 B transpose on Hopper, instead of the BF16 2 B); the
linear inputs saved for wgrad are their FP8 copies (1 B/element instead of 2), except the
attention output, which flash attention keeps in BF16 for its own backward.

Amax reductions: delayed scaling reduces all amaxes in one batched kernel per step;
tensorwise scaling reduces the amax of each sequence-parallel gathered input and output
gradient over the tensor-parallel group before quantising it (TE current-scaling docs);
block and MX scales need no reduction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hardware_catalog.schema import AcceleratorSpec

Fp8RecipeName = Literal["delayed", "tensorwise", "blockwise", "mxfp8"]

MX_SCALE_BYTES = 1.0 / 32.0
"""One E8M0 scale byte per 32 elements (OCP Microscaling Formats v1.0)."""
BLOCK_SCALE_BYTES = 4.0 / 128.0
"""One FP32 scale per 1×128 tile."""


@dataclass(frozen=True, slots=True)
class Fp8Recipe:
    """The costs of one recipe on one accelerator (module docstring)."""

    name: Fp8RecipeName
    transposes: bool
    """The GEMMs need a transposed FP8 copy of each operand (Hopper, TN layout only)."""
    quantize_bytes_per_element: float
    """HBM bytes read + written to quantise one BF16 element into every FP8 copy the
    forward and backward GEMMs need."""
    fused_quantize_bytes_per_element: float
    """The same when the producer (the norm) writes the FP8 copies itself."""
    weight_copy_bytes_per_param: float
    """FP8 weight copies kept resident per parameter (besides the BF16 weights)."""
    saved_input_bytes_per_element: float
    """Bytes a saved linear input takes (its FP8 copy for wgrad)."""
    amax_reductions: bool
    """Each quantised gathered tensor first all-reduces its amax over the tensor group."""
    kernels_per_quantization: int
    """Kernels one quantisation launches (amax + cast, or a fused cast-transpose)."""


def transpose_free(accelerator: AcceleratorSpec) -> bool:
    """The accelerator's FP8 GEMMs accept every operand layout (no transposed copies): the
    generation with FP4 / MX tensor cores (Blackwell, CDNA4), TE docs §"Layouts"."""
    return bool(accelerator.peak_tflops.get("fp4"))


def default_recipe(accelerator: AcceleratorSpec) -> Fp8RecipeName:
    """MXFP8 where the hardware scales MX blocks (Blackwell-class), else delayed scaling
    (Transformer Engine's and Megatron-Core's default)."""
    return "mxfp8" if transpose_free(accelerator) else "delayed"


def recipe(name: Fp8RecipeName, accelerator: AcceleratorSpec) -> Fp8Recipe:
    """The costs of `name` on `accelerator` (module docstring)."""
    free = transpose_free(accelerator)
    copies = 1 if free else 2  # FP8 copies a per-tensor-scaled operand needs
    if name in ("delayed", "tensorwise"):
        amax_pass = 2.0 if name == "tensorwise" else 0.0
        return Fp8Recipe(
            name=name,
            transposes=not free,
            quantize_bytes_per_element=2.0 + amax_pass + copies,
            fused_quantize_bytes_per_element=copies + amax_pass,
            weight_copy_bytes_per_param=float(copies),
            saved_input_bytes_per_element=1.0,
            amax_reductions=name == "tensorwise",
            kernels_per_quantization=2 if name == "tensorwise" else 1,
        )
    scale = MX_SCALE_BYTES if name == "mxfp8" else BLOCK_SCALE_BYTES
    # two quantisations from BF16 (row- and column-wise scale directions)
    return Fp8Recipe(
        name=name,
        transposes=not free,
        quantize_bytes_per_element=2 * (2.0 + 1.0 + scale),
        fused_quantize_bytes_per_element=2 * (1.0 + scale),
        weight_copy_bytes_per_param=2 * (1.0 + scale),
        saved_input_bytes_per_element=1.0 + scale,
        amax_reductions=False,
        kernels_per_quantization=2,
    )


def supports(name: Fp8RecipeName, accelerator: AcceleratorSpec) -> str | None:
    """Why `accelerator` cannot run `name` (None: it can). MXFP8 needs MX-scaling tensor
    cores (Blackwell, CDNA4); blockwise runs on Hopper (DeepGEMM) and, emulated through
    MXFP8, on Blackwell."""
    if not accelerator.peak_tflops.get("fp8"):
        return f"{accelerator.id} has no fp8 peak in the catalog"
    if name == "mxfp8" and not transpose_free(accelerator):
        return (
            f"fp8_recipe mxfp8 needs MX block-scaling tensor cores (Blackwell / CDNA4); "
            f"{accelerator.id} has none (use delayed, tensorwise or blockwise)"
        )
    return None
