"""torchtitan's own built-in flavors against the table the export decides with
(`app.exports.torchtitan.FLAVOR_ARGS`): a preset runs as a built-in flavor only when its RoPE
base, norm ε and rope scaling equal the flavor's, so the table must be torchtitan's
(optional: needs torchtitan 0.2.x and triton from the exports-check extra)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch (CPU build) from the exports-check extra")
pytest.importorskip("triton", reason="torchtitan's MoE kernels import triton (exports-check)")
pytest.importorskip("torchtitan", reason="needs torchtitan 0.2.x from the exports-check extra")

from app.exports import torchtitan as tt_export  # noqa: E402

pytestmark = [pytest.mark.exports_real, pytest.mark.filterwarnings("ignore")]


def _builtin_args(name: str, flavor: str) -> Any:
    if name == "llama3":
        from torchtitan.models.llama3 import llama3_args

        return llama3_args[flavor]
    if name == "qwen3":
        from torchtitan.models.qwen3 import qwen3_args

        return qwen3_args[flavor]
    from torchtitan.models.deepseek_v3 import deepseekv3_args

    return deepseekv3_args[flavor]


@pytest.mark.parametrize(("name", "flavor"), sorted(tt_export.FLAVOR_ARGS))
def test_flavor_table_is_torchtitans(name: str, flavor: str) -> None:
    real = _builtin_args(name, flavor)
    for key, value in tt_export.FLAVOR_ARGS[(name, flavor)].items():
        got = getattr(real, key)
        if dataclasses.is_dataclass(got):
            got = dataclasses.asdict(got)
        assert got == value, (name, flavor, key)


@pytest.mark.parametrize("preset", sorted(tt_export.TORCHTITAN_FLAVORS))
def test_the_preset_has_the_builtin_flavors_shape(preset: str) -> None:
    """The table maps a preset to a flavor of its own shape (layers, width, heads, vocabulary)."""
    from specs.presets import get_preset

    model = get_preset(preset)
    real = _builtin_args(*tt_export.TORCHTITAN_FLAVORS[preset])
    assert real.n_layers == model.num_layers
    assert real.dim == model.hidden_size
    assert real.n_heads == model.num_attention_heads
    assert real.vocab_size == model.vocab_size
