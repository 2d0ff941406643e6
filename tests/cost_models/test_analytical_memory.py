"""Memory formulas: Korthikanti et al. 2022 Table 2, in-flight micro-batches (Narayanan et al.
2021 §2.2). ZeRO bytes per parameter are the framework profiles' (test_frameworks.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from cm_support import gpt

from cost_models.analytical.memory import (
    inflight_1f1b,
    inflight_interleaved,
    layer_activation_bytes,
    logits_bytes,
)

S, B, H, A = 2048, 4, 2048, 16


def _act(t: int, sp: bool, rc: str) -> float:
    return layer_activation_bytes(gpt(h=H, a=A), False, B, S, t, 1, sp, False, rc)  # type: ignore[arg-type]


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_korthikanti_table2_rows(t: int) -> None:
    sbh = S * B * H
    ash = A * S / H
    # no parallelism: sbh(34 + 5as/h)
    assert _act(1, False, "none") == pytest.approx(sbh * (34 + 5 * ash), rel=1e-12)
    # tensor parallel: sbh(10 + 24/t + 5as/(ht))
    assert _act(t, False, "none") == pytest.approx(sbh * (10 + 24 / t + 5 * ash / t), rel=1e-12)
    # tensor + sequence parallel: sbh(34/t + 5as/(ht))
    if t > 1:
        assert _act(t, True, "none") == pytest.approx(sbh * (34 / t + 5 * ash / t), rel=1e-12)
        # tensor + sequence parallel + selective: 34·sbh/t
        assert _act(t, True, "selective") == pytest.approx(sbh * 34 / t, rel=1e-12)
    # tensor parallel + selective: sbh(10 + 24/t)
    assert _act(t, False, "selective") == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    # full recompute: 2sbh (the layer input)
    assert _act(t, False, "full") == 2 * sbh


def test_flash_attention_drops_score_terms_and_context_divides() -> None:
    m = gpt(h=H, a=A)
    flash = layer_activation_bytes(m, False, B, S, 1, 1, False, True, "none")
    # 34 sbh + the fp32 log-sum-exp (4·s·b·a) the kernel keeps
    assert flash == 34 * S * B * H + 4 * S * B * A
    half = layer_activation_bytes(m, False, B, S, 1, 2, False, True, "none")
    assert half == pytest.approx(flash / 2)


def test_inflight_1f1b() -> None:
    assert inflight_1f1b(4, 8) == ((4,), (3,), (2,), (1,))
    assert inflight_1f1b(4, 2) == ((2,), (2,), (2,), (1,))


@pytest.mark.parametrize(("p", "v"), [(2, 2), (4, 2), (4, 3), (8, 4), (3, 5)])
def test_interleaved_first_stage_matches_narayanan(p: int, v: int) -> None:
    m = 64
    counts = inflight_interleaved(p, v, m)
    # rank 0 holds p·(1 + (p−1)/(p·v)) micro-batches' worth of its layers (chunk = 1/v of them)
    assert Fraction(sum(counts[0]), v) == p * (1 + Fraction(p - 1, p * v))
    # every rank matches Megatron's warm-up count (v−1)·p + 2(p−j−1) + 1
    for j in range(p):
        assert sum(counts[j]) == (v - 1) * p + 2 * (p - j - 1) + 1


def test_interleaved_caps_at_microbatches() -> None:
    assert inflight_interleaved(4, 2, 3) == ((3, 3), (3, 3), (3, 3), (3, 1))


def test_logits_bytes() -> None:
    assert logits_bytes(2, 4096, 128256, 8, 1) == 4096 * 2 * 128256 / 8 * 4 * 2
