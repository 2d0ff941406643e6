"""The builder of the named length distributions: nearest-rank quantiles, worked by hand."""

from __future__ import annotations

from bench.length_distributions import entry, quantiles


def test_nearest_rank_quantiles_by_hand() -> None:
    # ten lengths 10, 20, …, 100: the q-quantile is the ceil(10 q)-th smallest
    lengths = [100, 10, 90, 20, 80, 30, 70, 40, 60, 50]
    got = quantiles(lengths, steps=4)  # q = 0, 0.25, 0.5, 0.75, 1
    # ceil(2.5) = 3rd -> 30, ceil(5) = 5th -> 50, ceil(7.5) = 8th -> 80
    assert got == [10, 30, 50, 80, 100]
    assert len(quantiles(lengths)) == 1001


def test_entry_keeps_both_sides_and_their_means() -> None:
    rows = [
        {"num_prefill_tokens": "4", "num_decode_tokens": "1"},
        {"num_prefill_tokens": "8", "num_decode_tokens": "3"},
    ]
    got = entry(rows, "num_prefill_tokens", "num_decode_tokens")
    assert got["requests"] == 2
    assert got["prompt"]["mean"] == 6.0 and got["output"]["mean"] == 2.0
    assert got["prompt"]["percentiles"][0] == 4 and got["prompt"]["percentiles"][-1] == 8
    assert got["output"]["percentiles"][500] == 1  # ceil(0.5 * 2) = 1st smallest
