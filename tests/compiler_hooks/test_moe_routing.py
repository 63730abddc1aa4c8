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
