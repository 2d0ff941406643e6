"""Parameter counts of ModelSpec against hand-derived integers (formula terms in comments).

Layer anatomy from docs/reference/cost_formulas.md: attention h·a·d + 2·h·g·d + a·d·h,
gated MLP 3·h·f (plain 2·h·f), RMSNorm h (LayerNorm 2h) per norm, two norms per layer, a final
norm, embedding V·h and an untied head V·h.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specs.model import ModelSpec, MoESpec


def test_llama3_70b_parameter_count() -> None:
    # h=8192, a=64, g=8, d=128, f=28672, L=80, V=128256, untied, RMSNorm
    # attention: 8192·8192 (Q) + 2·8192·1024 (K,V) + 8192·8192 (O)
    #          = 67_108_864 + 16_777_216 + 67_108_864             = 150_994_944
    # MLP:       3·8192·28672                                      = 704_643_072
    # norms:     2·8192                                            =      16_384
    # layer                                                        = 855_654_400
    # 80 layers                                                    = 68_452_352_000
    # embedding + head: 2·128256·8192                              =  2_101_346_304
    # final norm                                                   =          8_192
    # total                                                        = 70_553_706_496 (70.55 B)
    spec = ModelSpec(
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        ffn_hidden_size=28672,
        vocab_size=128256,
    )
    assert spec.attention_parameters() == 150_994_944
    assert spec.dense_mlp_parameters() == 704_643_072
    assert spec.layer_parameters(0) == 855_654_400
    assert spec.num_parameters() == 70_553_706_496


def test_gpt3_175b_parameter_count() -> None:
    # h=12288, a=96, f=4h=49152, L=96, V=50257, learned positions 2048, tied, LayerNorm, biases
    # attention: 4·h² = 603_979_776; QKV bias 3h = 36_864; output bias h = 12_288
    #          = 604_028_928
    # MLP:       2·h·4h = 1_207_959_552; biases 4h + h = 61_440   = 1_208_020_992
    # norms:     2 LayerNorms · 2h                                 =        49_152
    # layer      = 12h² + 13h                                      = 1_812_099_072
    # 96 layers                                                    = 173_961_510_912
    # embedding: (50257 + 2048)·12288                              =     642_723_840
    # head: tied (0) + final LayerNorm 2h                          =          24_576
    # total                                                        = 174_604_259_328 (174.6 B)
    spec = ModelSpec(
        num_layers=96,
        hidden_size=12288,
        num_attention_heads=96,
        ffn_hidden_size=49152,
        vocab_size=50257,
        gated_mlp=False,
        tie_embeddings=True,
        norm="layernorm",
        attention_bias=True,
        mlp_bias=True,
        position_embedding="learned",
        max_position_embeddings=2048,
        dropout=True,
    )
    assert spec.attention_parameters() == 604_028_928
    assert spec.dense_mlp_parameters() == 1_208_020_992
    assert spec.layer_parameters(0) == 12 * 12288**2 + 13 * 12288 == 1_812_099_072
    assert spec.embedding_parameters() == 642_723_840
    assert spec.num_parameters() == 174_604_259_328


def test_llama31_405b_parameter_count() -> None:
    # h=16384, a=128, g=8, d=128, f=53248, L=126, V=128256, untied, RMSNorm
    # attention: 2·16384² + 2·16384·1024 = 536_870_912 + 33_554_432 = 570_425_344
    # MLP:       3·16384·53248                                      = 2_617_245_696
    # norms:     2·16384                                            =        32_768
    # layer                                                         = 3_187_703_808
    # 126 layers                                                    = 401_650_679_808
    # embedding + head: 2·128256·16384                              =   4_202_692_608
    # final norm                                                    =          16_384
    # total                                                         = 405_853_388_800 (405.8 B)
    spec = ModelSpec(
        num_layers=126,
        hidden_size=16384,
        num_attention_heads=128,
        num_kv_heads=8,
        ffn_hidden_size=53248,
        vocab_size=128256,
    )
    assert spec.layer_parameters(0) == 3_187_703_808
    assert spec.num_parameters() == 405_853_388_800


def test_qk_norm_adds_two_head_dims_per_layer() -> None:
    # Qwen3: RMSNorm of size head_dim on queries and on keys → 2·128 = 256 per layer
    base = {
        "num_layers": 4,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "num_kv_heads": 8,
        "head_dim": 128,
        "ffn_hidden_size": 3072,
        "vocab_size": 1000,
    }
    plain = ModelSpec(**base)
    normed = ModelSpec(**base, qk_norm=True)
    assert normed.num_parameters() - plain.num_parameters() == 4 * 256


def test_qwen2_moe_block_hand_count() -> None:
    # Qwen2-57B-A14B MoE block: h=3584, 64 experts of f=2560, top-8, shared f=20480 + gate
    # expert:  3·3584·2560                   =    27_525_120
    # router:  3584·64                       =       229_376
    # routed:  64 · 27_525_120                = 1_761_607_680 (active: 8 · … = 220_200_960)
    # shared:  3·3584·20480                  =   220_200_960
    # gate:    3584
    spec = ModelSpec(
        num_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_kv_heads=4,
        ffn_hidden_size=18944,
        vocab_size=151936,
        attention_bias=True,
        moe=MoESpec(
            num_experts=64,
            top_k=8,
            expert_ffn_hidden_size=2560,
            num_shared_experts=1,
            shared_expert_ffn_hidden_size=20480,
            shared_expert_gate=True,
        ),
    )
    assert spec.expert_parameters() == 27_525_120
    assert spec.moe_block_parameters() == 229_376 + 1_761_607_680 + 220_200_960 + 3584
    assert spec.moe_block_parameters(active=True) == 229_376 + 220_200_960 + 220_200_960 + 3584
    # QKV biases: a·d + 2·g·d = 3584 + 2·512 = 4608
    assert spec.attention_parameters() == 2 * 3584 * 3584 + 2 * 3584 * 512 + 4608


def test_deepseek_v3_mla_block_hand_count() -> None:
    # MLA (arXiv 2412.19437 §2.1.1), h=7168, a=128, q_lora 1536, kv_lora 512, nope 128, rope 64,
    # v 128:
    #   W_DQ 7168·1536 = 11_010_048, q norm 1536, W_UQ 1536·128·192 = 37_748_736
    #   W_DKV+W_KR 7168·(512+64) = 4_128_768, kv norm 512, W_UK+W_UV 512·128·256 = 16_777_216
    #   W_O 128·128·7168 = 117_440_512                          → 187_107_328
    spec = ModelSpec(
        num_layers=61,
        hidden_size=7168,
        num_attention_heads=128,
        ffn_hidden_size=18432,
        vocab_size=129280,
        mla={
            "q_lora_rank": 1536,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
        },
    )
    assert spec.attention_parameters() == 187_107_328


def test_moe_layer_pattern_dense_prefix_and_sparse_step() -> None:
    # DeepSeek: first 3 dense then all MoE; Qwen decoder_sparse_step=2: layers 1, 3, 5 … MoE
    # (HF modeling_qwen2_moe: (layer_idx + 1) % decoder_sparse_step == 0)
    common = {
        "num_layers": 8,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "ffn_hidden_size": 128,
        "vocab_size": 100,
    }
    deepseek_like = ModelSpec(
        **common, moe=MoESpec(num_experts=4, top_k=2, expert_ffn_hidden_size=32, num_dense_layers=3)
    )
    assert [deepseek_like.is_moe_layer(i) for i in range(8)] == [False] * 3 + [True] * 5
    qwen_like = ModelSpec(
        **common, moe=MoESpec(num_experts=4, top_k=2, expert_ffn_hidden_size=32, layer_frequency=2)
    )
    assert [i for i in range(8) if qwen_like.is_moe_layer(i)] == [1, 3, 5, 7]
    assert qwen_like.num_moe_layers == 4


@given(layers=st.integers(1, 130), dense=st.integers(0, 10), frequency=st.integers(1, 6))
def test_moe_layer_count_in_closed_form_matches_the_layer_pattern(
    layers: int, dense: int, frequency: int
) -> None:
    dense = min(dense, layers)  # the spec refuses more leading dense layers than layers
    spec = ModelSpec(
        num_layers=layers,
        hidden_size=64,
        num_attention_heads=4,
        ffn_hidden_size=128,
        vocab_size=100,
        moe=MoESpec(
            num_experts=4,
            top_k=2,
            expert_ffn_hidden_size=32,
            num_dense_layers=dense,
            layer_frequency=frequency,
        ),
    )
    assert spec.num_moe_layers == sum(spec.is_moe_layer(i) for i in range(layers))


def test_router_bias_adds_one_parameter_per_expert_per_moe_layer() -> None:
    common = {
        "num_layers": 5,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "ffn_hidden_size": 128,
        "vocab_size": 100,
    }
    moe = {"num_experts": 16, "top_k": 2, "expert_ffn_hidden_size": 32, "num_dense_layers": 1}
    without = ModelSpec(**common, moe=MoESpec(**moe))
    with_bias = ModelSpec(**common, moe=MoESpec(**moe, router_bias=True))
    assert with_bias.num_parameters() - without.num_parameters() == 4 * 16
