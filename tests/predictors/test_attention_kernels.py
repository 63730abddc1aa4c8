"""The flash_attn package's kernel (FlashAttention-2) on a Hopper GPU runs no faster than its authors' published
rates (predictors/attention_kernels.py), and a training graph's attention says whether it is causal."""

from __future__ import annotations

import pytest

from perfpredict.predictors import attention_kernels as ak

transformers = pytest.importorskip("transformers")

# a one-layer Llama with head dim 128 (hidden 256, 2 heads), as the published figures' head dim
TINY = {
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 16384,
}
BATCH, SEQ = 1, 16384


@pytest.fixture(scope="module")
def graphs():
    import torch

    import perfpredict
    from perfpredict.compiler_hooks.hf_frontend import config_from_dict

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config_from_dict(TINY, "tiny-llama"))
    ids = torch.zeros(BATCH, SEQ, dtype=torch.long, device="meta")
    return {
        a: perfpredict.featurize(model, (ids,), phase="training", dtype="bfloat16", attn_implementation=a)
        for a in ("sdpa", "flash_attention_2")
    }


def test_the_published_rates_are_read_by_key_length_and_scaled_by_peak():
    h100 = 989.4e12  # the H100 SXM's datasheet bf16 peak, the basis the paper's rates are read on
    # the figures themselves: forward causal 335 TFLOP/s at 16k keys, backward 322 (not causal) at 16k
    assert ak.fa2_rate_flop_per_s(backward=False, causal=True, keys=16384, peak_bf16_flop_per_s=h100) == 335e12
    assert ak.fa2_rate_flop_per_s(backward=True, causal=False, keys=16384, peak_bf16_flop_per_s=h100) == 322e12
    # past the table: its end; halfway between 1k and 2k in log length: (350 + 362) / 2 = 356
    assert ak.fa2_rate_flop_per_s(backward=False, causal=False, keys=65536, peak_bf16_flop_per_s=h100) == 370e12
    half = ak.fa2_rate_flop_per_s(backward=False, causal=False, keys=1448, peak_bf16_flop_per_s=h100)
    assert half == pytest.approx(356e12, rel=2e-3)
    # a causal backward loses what the causal forward loses at that length: 322 x 335 / 370 = 291.5 at 16k
    causal_bwd = ak.fa2_rate_flop_per_s(backward=True, causal=True, keys=16384, peak_bf16_flop_per_s=h100)
    assert causal_bwd == pytest.approx(322e12 * 335 / 370)
    # an H20 (148 TFLOP/s bf16) reaches 148/989.4 of it
    assert ak.fa2_rate_flop_per_s(
        backward=False, causal=True, keys=16384, peak_bf16_flop_per_s=148e12
    ) == pytest.approx(335e12 * 148 / 989.4)


def test_a_training_graphs_attention_says_it_is_causal(graphs):
    # the AOT graph passes is_causal positionally (forward and backward alike): read there too
    for graph in graphs.values():
        attention = [n for n in graph.nodes if n.op == "attention"]
        assert len(attention) == 2 and all(n.attrs.get("is_causal") is True for n in attention)


def test_flash_attn_2_on_an_h100_takes_at_least_its_published_rate(graphs):
    from perfpredict.graph_report import report_for_graph
    from perfpredict.request import EVERY_OP

    def attention_ms(attn: str, device: str) -> dict[bool, tuple[float, int]]:
        report = report_for_graph(graphs[attn], device=device, precision="bf16", top_ops=EVERY_OP)
        rows = [o for o in report.per_op if o.op == "attention"]
        return {"backward" in o.target: (o.time_ms, o.flops) for o in rows}

    flash = attention_ms("flash_attention_2", "H100-SXM")
    forward_ms, forward_flops = flash[False]
    # 4 x 1 x 2 heads x 16384^2 x 128 = 275 GFLOP counted, half of it done causally, at 335 TFLOP/s: 0.410 ms
    assert forward_flops == 4 * 2 * SEQ * SEQ * 128
    assert forward_ms >= forward_flops / 2 / 335e12 * 1e3 * 0.999
    backward_ms, backward_flops = flash[True]  # 2.5 x the forward's FLOPs at 291.5 TFLOP/s: 1.18 ms
    assert backward_ms >= backward_flops / 2 / (322e12 * 335 / 370) * 1e3 * 0.999
    # torch's own fused attention (sdpa) reads the learned rate, faster than FA2 on a Hopper GPU at this length
    sdpa = attention_ms("sdpa", "H100-SXM")
    assert sdpa[False][0] < forward_ms and sdpa[True][0] < backward_ms
    # an A100 runs FA2 as its state of the art: no published floor there (the learned rate, whatever the target)
    a100_flash, a100_sdpa = attention_ms("flash_attention_2", "A100-80GB"), attention_ms("sdpa", "A100-80GB")
    assert a100_flash[True][0] == pytest.approx(a100_sdpa[True][0], rel=0.05)
