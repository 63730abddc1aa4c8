"""LoRA and QLoRA, float8 training, the optimizer's implementation and ZeRO-Offload (issue 46 items 3, 5 and 7), on
a small Llama built from its config: each term against a count by hand."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

from perfpredict.compiler_hooks import float8_linears, nf4_base
from perfpredict.compiler_hooks.linears import frozen_linear_params, linear_params
from perfpredict.core.errors import InvalidInputError
from perfpredict.graph_report import report_for_graph
from perfpredict.hardware.devices import get_device

# a small Llama: hidden h = 256, MLP f = 688, 4 heads, 4 layers, vocabulary V = 1,000, batch 2 x 64 tokens
h, f, L, V, B, S = 256, 688, 4, 1_000, 2, 64
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": h,
    "intermediate_size": f,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": L,
    "vocab_size": V,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}
LINEAR = 4 * h * h + 3 * h * f  # a layer's seven linears: q, k, v, o (h x h) and gate, up, down (h x f): 790,528
NORMS = 2 * h
PARAMS = L * (LINEAR + NORMS) + 2 * V * h + h  # 4 x 791,040 + the embedding and the untied head + the final norm


def _capture(lora=None):
    from perfpredict.compiler_hooks import hf_frontend as hf
    from perfpredict.compiler_hooks.hf_capture import capture

    config = hf.config_from_dict(CONFIG, name="small-llama")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capture(config, batch_size=B, seq_len=S, dtype="bfloat16", phase="training", lora=lora)[0]


@pytest.fixture(scope="module")
def full():
    return _capture()


@pytest.fixture(scope="module")
def lora():
    return _capture((8, "all-linear"))


def test_lora_trains_only_the_adapters(lora):
    # rank 8 on all seven linears: A is 8 x in and B is out x 8, so each linear adds 8 x (in + out):
    # q, k, v, o: 8 x 512 each; gate and up: 8 x (256 + 688); down: 8 x (688 + 256) -> 8 x (4 x 512 + 3 x 944) per layer
    adapters = L * 8 * (4 * 512 + 3 * 944)  # 4 x 39,040 = 156,160
    assert lora.trainable_param_count == adapters
    assert lora.param_count == PARAMS + adapters + 32  # and RoPE's inv_freq buffer, head_dim / 2 = 64 / 2 = 32
    assert frozen_linear_params(lora) == L * LINEAR  # the base linears QLoRA quantizes


def test_a_lora_step_holds_no_gradient_or_state_for_the_base(lora):
    report = report_for_graph(lora, precision="amp-bf16", predictor="analytical", weights_built_in=None)
    m, adapters = report.memory, lora.trainable_param_count
    # amp-bf16: float32 adapters (4 bytes) with float32 gradients and two AdamW states, the frozen base in bf16
    assert m.params_bytes == adapters * 4 + (lora.param_count - adapters) * 2
    assert (m.gradients_bytes, m.optimizer_state_bytes) == (adapters * 4, adapters * 8)


def test_qlora_stores_the_base_linears_in_nf4_and_dequantizes_before_each_matmul(lora, full):
    lo = report_for_graph(lora, precision="amp-bf16", predictor="analytical", weights_built_in=None)
    q = report_for_graph(lora, precision="amp-bf16", predictor="analytical", weights_built_in=None, qlora=True)
    # the base linears' 4 x 790,528 weights at 4.127 bits instead of 16: 2 - 4.127/8 bytes less each
    nf4 = L * LINEAR
    assert lo.memory.params_bytes - q.memory.params_bytes == round(nf4 * 2) - round(nf4 * 4.127 / 8)
    # one dequantize per base matmul in the forward and one in the backward (the input's gradient): 7 x 4 x 2, but
    # the first layer's q, k and v, whose input (the frozen embedding's output) needs no gradient: 56 - 3
    step = nf4_base.apply(lora)
    dequant = [n for n in step.nodes if n.attrs.get("nf4")]
    assert len(dequant) == 2 * 7 * L - 3
    # each writes its weight in bf16: every base weight twice, less the three h x h weights of layer 0's q, k, v
    assert sum(n.bytes_written for n in dequant) == (2 * nf4 - 3 * h * h) * 2
    assert q.latency_ms.value > lo.latency_ms.value  # the dequantizing costs time
    with pytest.raises(InvalidInputError, match="lora_rank"):  # nothing frozen to quantize
        nf4_base.apply(full)


@pytest.mark.parametrize("recipe, amax_ops", [("tensorwise", True), ("rowwise", True), ("delayed", False)])
def test_float8_runs_the_linears_gemms_at_the_float8_rate_with_their_casts(full, recipe, amax_ops):
    step = float8_linears.apply(full, recipe, get_device("H100-SXM"))
    gemms = [n for n in step.nodes if n.attrs.get("float8")]
    casts = [n for n in step.nodes if n.attrs.get("float8_cast") and n.target == "to_float8"]
    amaxes = [n for n in step.nodes if n.attrs.get("float8_cast") and n.target == "amax"]
    # 7 linears a layer, each with three GEMMs (output, input gradient, weight gradient), each casting two operands
    assert len(gemms) == 3 * 7 * L
    assert len(casts) == 2 * len(gemms) and len(amaxes) == (len(casts) if amax_ops else 0)
    assert all(t.dtype == "float8_e4m3fn" for g in gemms for t in g.inputs)
    assert all(g.outputs[0].dtype == "bfloat16" for g in gemms)
    # the analytical rate of a float8 GEMM is the H100's float8 tensor peak (1,978.9 TFLOP/s x 0.8 achieved)
    from perfpredict.predictors.analytical import _node_rates
    from perfpredict.predictors.base import RunConfig

    rates = _node_rates(step, get_device("H100-SXM"), RunConfig(phase="training"), ideal=True)
    assert {rates[step.nodes.index(g)] for g in gemms} == {1978.9e12}


def test_transformer_engine_keeps_a_float8_weight_and_its_transpose(full):
    te = report_for_graph(full, precision="amp-bf16", predictor="analytical", float8="delayed", weights_built_in=None)
    assert linear_params(full) == L * LINEAR
    assert te.memory.float8_copies_bytes == 2 * L * LINEAR  # one byte each for the weight and its transpose
    assert "float8 weight copies" in dict(te.memory.rows())


def test_float8_is_refused_on_a_gpu_without_float8_tensor_cores(full):
    with pytest.raises(InvalidInputError, match="float8 tensor cores, which A100-80GB does not have"):
        report_for_graph(full, device="A100-80GB", float8="tensorwise")


@pytest.mark.parametrize(
    "impl, temporaries",
    [
        ("foreach", PARAMS * 4),  # foreach AdamW: one float32 copy of every parameter (_foreach_sqrt)
        ("fused", 0),
        ("for-loop", V * h * 4),  # one parameter at a time: the largest, the 1,000 x 256 embedding or head
    ],
)
def test_the_optimizers_temporaries_follow_its_implementation(full, impl, temporaries):
    from perfpredict.predictors import optimizer_step
    from perfpredict.predictors.base import RunConfig

    config = RunConfig(phase="training", precision="amp-bf16", optimizer_impl=impl)
    assert optimizer_step.scratch_bytes(full, config, full.trainable_param_count * 4) == temporaries


def test_zero_offload_moves_the_state_and_the_step_to_the_host(full):
    from perfpredict.predictors import optimizer_step

    base = report_for_graph(full, precision="amp-bf16", predictor="analytical", weights_built_in=None)
    off = report_for_graph(
        full, precision="amp-bf16", predictor="analytical", weights_built_in=None, offload_optimizer=True
    )
    # on the GPU: bf16 weights (2 bytes), the gradients' bucket (all of them here, under 5e8), no state
    assert (off.memory.params_bytes, off.memory.gradients_bytes) == (PARAMS * 2 + 32 * 2, PARAMS * 2)
    assert off.memory.optimizer_state_bytes == off.memory.optimizer_temporaries_bytes == 0
    # the step: the bf16 weights back over PCIe Gen5 x16 (32 GT/s x 16 x 128/130 = 63.0 GB/s at 80%) and the
    # host's Adam (30 bytes a parameter at 50 GB/s); the gradients' copy out hides under the backward
    link = 32 * 16 * 128 / 130 / 8 * 1e9 * 0.8
    step_s = PARAMS * 2 / link + PARAMS * 30 / 50e9
    assert optimizer_step.offload_s(full, get_device("H100-SXM"), _config(), 1.0) == pytest.approx(step_s)
    assert off.latency_ms.value > base.latency_ms.value


def _config():
    from perfpredict.predictors.base import RunConfig

    return RunConfig(phase="training", precision="amp-bf16", offload_optimizer=True)
