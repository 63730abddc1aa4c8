"""Data-routed MoE layers (Switch Transformers) capture on meta tensors with a balanced, static route."""

from __future__ import annotations

import pytest

from perfpredict.compiler_hooks.moe_routing import ROUTING_NOTE, Routing

pytest.importorskip("transformers")


def test_balanced_rows_are_capped_by_capacity():
    # 512 tokens per sequence, 4 experts, top-1: 128 each, but capacity 64 per sequence and 2 sequences -> 128
    assert Routing(4, 1, 64, 2).rows(1024) == 128
    assert Routing(4, 1, None, 2).rows(1024) == 256  # no capacity: the balanced share
    assert Routing(8, 2, None, 1).rows(10) == 3  # ceil(10 x 2 / 8)


def test_switch_transformers_capture_from_a_config(tmp_path):
    import json

    from perfpredict.compiler_hooks import hf_capture

    config = {
        "model_type": "switch_transformers",
        "d_model": 64,
        "d_ff": 128,
        "d_kv": 16,
        "num_heads": 4,
        "num_layers": 4,
        "num_decoder_layers": 4,
        "num_sparse_encoder_layers": 2,
        "num_sparse_decoder_layers": 2,
        "encoder_sparse_step": 2,
        "decoder_sparse_step": 2,
        "num_experts": 4,
        "expert_capacity": 8,
        "vocab_size": 128,
        "router_dtype": "float32",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    graph, _ = hf_capture.capture(str(path), batch_size=2, seq_len=32, dtype="float32", phase="inference")
    assert ROUTING_NOTE in graph.notes
    experts = [n for n in graph.nodes if n.op == "matmul" and ".experts." in (n.module_path or "")]
    assert len(experts) == 2 * 4 * 2  # two sparse encoder layers, four experts, two linears each
    # each expert takes min(32 tokens / 4 experts, capacity 8) per sequence x 2 sequences = 16 rows
    assert {n.flops for n in experts} == {2 * 16 * 64 * 128}
    blocks = {n.module_path.split(".")[1] for n in graph.nodes if (n.module_path or "").startswith("block.")}
    assert len(blocks) == 4  # every encoder block captured, none lost to a fallback to eager


# Each HuggingFace MoE family from a small config on meta: hidden 64, 2 layers, 4 experts, top-2
_SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 128,
    "max_position_embeddings": 256,
    "num_experts_per_tok": 2,
}
_DEEPSEEK = {
    "n_routed_experts": 4,
    "moe_intermediate_size": 32,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,  # layer 0 dense, layer 1 MoE
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "n_group": 1,
    "topk_group": 1,
}
# (config class, its own fields, MoE layers, each expert's intermediate size)
FAMILIES = {
    "mixtral": ("MixtralConfig", {"num_local_experts": 4}, 2, 128),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        {"num_experts": 4, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64},
        2,
        32,
    ),
    "deepseek_v2": ("DeepseekV2Config", {**_DEEPSEEK, "q_lora_rank": None}, 1, 32),
    "deepseek_v3": ("DeepseekV3Config", {**_DEEPSEEK, "q_lora_rank": 32}, 1, 32),
    "olmoe": ("OlmoeConfig", {"num_experts": 4}, 2, 128),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_hf_moe_family_is_costed_with_the_balanced_route_through_the_api(family):
    import torch
    import transformers

    import perfpredict

    cls, own, moe_layers, inter = FAMILIES[family]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**_SMALL, **own))
    ids = torch.zeros(2, 32, dtype=torch.long, device="meta")
    report = perfpredict.predict(model, (ids,), device="L4", predictor="analytical")
    assert report.assumptions["MoE routing"] == ROUTING_NOTE.removeprefix("MoE routing: ")
    graph = perfpredict.featurize(model, (ids,))
    assert graph.coverage == 1.0  # the grouped matmuls and their histc were "unknown" (0 FLOPs)
    grouped = [n for n in graph.nodes if "grouped_mm" in n.target]
    # 2 x 32 tokens x top-2 = 128 rows per layer, each through gate+up (64 -> 2 x inter) and down (inter -> 64)
    rows = 2 * 32 * 2
    per_layer = 2 * rows * 64 * (2 * inter) + 2 * rows * inter * 64
    assert len(grouped) == 2 * moe_layers and sum(n.flops for n in grouped) == moe_layers * per_layer


def test_switch_transformers_built_on_meta_is_predicted_through_the_api():
    """It raised MetaCaptureError (nonzero() in the experts); the API routes it as the CLI does."""
    import torch
    import transformers

    import perfpredict

    config = transformers.SwitchTransformersConfig(
        d_model=64, d_ff=128, d_kv=16, num_heads=4, num_layers=2, num_decoder_layers=2, num_sparse_encoder_layers=1,
        num_sparse_decoder_layers=1, encoder_sparse_step=2, decoder_sparse_step=2, num_experts=4, expert_capacity=8,
        vocab_size=128,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.SwitchTransformersForConditionalGeneration(config)
    ids = torch.zeros(2, 32, dtype=torch.long, device="meta")
    report = perfpredict.predict(model, (ids, torch.ones_like(ids), ids), device="L4", predictor="analytical")
    assert "MoE routing" in report.assumptions
    graph = perfpredict.featurize(model, (ids, torch.ones_like(ids), ids))
    experts = [n for n in graph.nodes if n.op == "matmul" and ".experts." in (n.module_path or "")]
    # one sparse layer in the encoder and one in the decoder, 4 experts, 2 linears each; min(32 / 4, capacity 8)
    # tokens per sequence x 2 sequences = 16 rows per expert
    assert len(experts) == 2 * 4 * 2 and {n.flops for n in experts} == {2 * 16 * 64 * 128}
