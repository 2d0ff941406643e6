"""GEMM roofline and attention-core timing against hand-derived values."""

from __future__ import annotations

import pytest

from cost_models.analytical.attention import AttentionCoreModel
from cost_models.analytical.gemm import RooflineGemm, tile_utilisation

GEMM = RooflineGemm(989.4e12, 0.803, 3350e9, 2.0, 5e-6)


def test_tile_utilisation() -> None:
    assert tile_utilisation(4096, 8192, 1024) == 1.0
    # m = 100 pads to 128; n = 200 pads to 256; k = 96 pads to 128
    assert tile_utilisation(100, 96, 200) == pytest.approx((100 * 96 * 200) / (128 * 128 * 256))


def test_large_gemm_is_compute_bound() -> None:
    m, k, n = 4096, 8192, 8192
    # best-shape efficiency × k / (k + 384): pipeline fill + epilogue per tile
    expected = 2 * m * k * n / (989.4e12 * 0.803 * 8192 / (8192 + 384)) + 5e-6
    assert GEMM.time_s(m, k, n) == pytest.approx(expected, rel=1e-12)
    fwd, bwd = GEMM.forward_backward_s(m, k, n)
    # backward: data gradient (m×n)·(n×k) reduces over n = 8192, weight gradient
    # (k×m)·(m×n) over m = 4096
    dgrad = 2 * m * n * k / (989.4e12 * 0.803 * 8192 / (8192 + 384)) + 5e-6
    wgrad = 2 * k * m * n / (989.4e12 * 0.803 * 4096 / (4096 + 384)) + 5e-6
    assert bwd == pytest.approx(dgrad + wgrad, rel=1e-12)


def test_short_reductions_run_below_best_shape_efficiency() -> None:
    # same FLOPs, k = 512 instead of 8192: k / (k + 384) = 0.571 vs 0.955
    long_k = GEMM.time_s(8192, 8192, 512)
    short_k = GEMM.time_s(8192, 512, 8192)
    assert short_k / long_k == pytest.approx(
        ((2 * 8192 * 8192 * 512) / (989.4e12 * 0.803 * 512 / 896) + 5e-6)
        / ((2 * 8192 * 8192 * 512) / (989.4e12 * 0.803 * 8192 / 8576) + 5e-6),
        rel=1e-12,
    )


def test_thin_gemm_is_memory_bound() -> None:
    # m = 128 tokens against a 8192×8192 weight: intensity ~ 120 FLOP/B < ridge ~ 296
    m, k, n = 128, 8192, 8192
    mem = (m * k + k * n + m * n) * 2 / (3350e9 * 0.8)
    assert GEMM.time_s(m, k, n) == pytest.approx(mem + 5e-6, rel=1e-12)


def test_flash_attention_causal_half_and_context_split() -> None:
    att = AttentionCoreModel(989.4e12, 0.6, 0.803, 3350e9, 2.5, 0.0)
    b, s, heads, d = 1, 4096, 8, 128
    full = 2 * b * s * s * heads * (2 * d)
    assert att.forward_time_s(b, s, heads, d, d, 1, True) == pytest.approx(
        0.5 * full / (989.4e12 * 0.6)
    )
    assert att.forward_time_s(b, s, heads, d, d, 4, True) == pytest.approx(
        0.5 * full / 4 / (989.4e12 * 0.6)
    )
    assert att.backward_time_s(b, s, heads, d, d, 1, True) == pytest.approx(
        2.5 * 0.5 * full / (989.4e12 * 0.6)
    )
    # the unfused path computes the whole s² and streams the scores through HBM
    unfused = att.forward_time_s(b, s, heads, d, d, 1, False)
    assert unfused == pytest.approx(
        full / (989.4e12 * 0.803) + 6 * 2 * heads * s * s / (3350e9 * 0.8)
    )
