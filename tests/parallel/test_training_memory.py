"""Memory per GPU of Llama-2-7B and Llama-3-70B training steps, term by term, against counts worked out by hand
(issue 46, "Memory by hand count"; issue 45 item 4: FSDP and ZeRO shard every term their strategy shards).

AdamW in bf16 mixed precision. Each model is captured once, at batch 1 and sequence 32, the way the CLI captures it
(two layers traced, the others copied: ``layer_replication``), so every figure below is the whole model's.
"""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("transformers")

from perfpredict.compiler_hooks import recompute
from perfpredict.parallel import memory as mem
from perfpredict.parallel.plan import parse_plan
from perfpredict.parallel.structure import backward_start

B, S = 1, 32  # one sequence of 32 tokens
GIB = 2**30


class Llama:
    """A Llama config's sizes and its parameters by hand."""

    def __init__(self, hf_id, V, h, f, L, a, kv):
        self.hf_id, self.V, self.h, self.f, self.L, self.a, self.kv = hf_id, V, h, f, L, a, kv
        d = h // a  # head dim 128
        # per layer: q and o (h x h), k and v (h x kv*d), gate, up and down (h x f), two RMSNorm weights (h)
        self.layer = 2 * h * h + 2 * h * kv * d + 3 * h * f + 2 * h
        # embedding and untied LM head (V x h each), the final norm (h)
        self.root = 2 * V * h + h
        self.params = L * self.layer + self.root


LLAMA2_7B = Llama("meta-llama/Llama-2-7b-hf", V=32000, h=4096, f=11008, L=32, a=32, kv=32)
LLAMA3_70B = Llama("meta-llama/Meta-Llama-3-70B", V=128256, h=8192, f=28672, L=80, a=64, kv=8)


def test_the_hand_counts_of_the_parameters():
    # Llama-2-7B: 32 x (2*4096^2 + 2*4096*4096 + 3*4096*11008 + 2*4096) + 2*32000*4096 + 4096
    #           = 32 x 202,383,360 + 262,148,096 = 6,738,415,616
    assert LLAMA2_7B.params == 6_738_415_616
    # Llama-3-70B: 80 x (2*8192^2 + 2*8192*1024 + 3*8192*28672 + 2*8192) + 2*128256*8192 + 8192
    #            = 80 x 855,654,400 + 2,101,354,496 = 70,553,706,496
    assert LLAMA3_70B.params == 70_553_706_496


@pytest.fixture(scope="module", params=[LLAMA2_7B, LLAMA3_70B], ids=["llama2-7b", "llama3-70b"])
def llama(request):
    from perfpredict.compiler_hooks.hf_capture import capture

    model = request.param
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph, _ = capture(model.hf_id, batch_size=B, seq_len=S, dtype="bfloat16", phase="training")
    return model, graph


def test_the_captured_graph_holds_the_hand_counted_parameters(llama):
    model, graph = llama
    assert graph.trainable_param_count == model.params
    assert graph.param_count == model.params + 64  # the rotary embedding's inv_freq buffer, head_dim / 2 = 64


def _terms(graph, plan, precision="amp-bf16", **run):
    from perfpredict.request import Request

    plan = parse_plan(plan)
    each = mem.per_param(graph, precision, "adamw", plan, Request(**run))
    stage = plan.shard_stage if plan.dp > 1 else 0
    return each, mem.sharded_state(graph.trainable_param_count, each, stage, plan.shard_ranks)


# bytes per parameter on one rank (weights, gradients, optimizer state, optimizer temporaries) and the autocast
# copies, for N data-parallel ranks:
#   DDP, amp-bf16 (torch.autocast): float32 weights 4, float32 gradients 4, AdamW's two float32 states 8, foreach
#       AdamW's float32 temporary 4, bf16 autocast copies 2: nothing sharded;
#   ZeRO-1/2/3 (DeepSpeed bf16): bf16 weights 2, bf16 gradients 2, float32 master weights + two states 12, no
#       temporary (FusedAdam); stage 1 shards the 12, stage 2 also the gradients, stage 3 also the weights;
#   FSDP FULL_SHARD (MixedPrecisionPolicy bf16/float32): 4 + 4 + 8 + 4, all divided by N.
def _expected(strategy, n):
    return {
        "ddp": (4, 4, 8, 4, 2),
        "zero1": (2, 2, 12 / n, 0, 0),
        "zero2": (2, 2 / n, 12 / n, 0, 0),
        "zero3": (2 / n, 2 / n, 12 / n, 0, 0),
        "fsdp": (4 / n, 4 / n, 8 / n, 4 / n, 0),
    }[strategy]


PLANS = {
    "ddp": {},
    "zero1": {"zero_stage": 1},
    "zero2": {"zero_stage": 2},
    "zero3": {"zero_stage": 3},
    "fsdp": {"fsdp": True},
}


@pytest.mark.parametrize(
    "strategy, n", [("ddp", 1), ("ddp", 8)] + [(s, n) for s in PLANS if s != "ddp" for n in (8, 64)]
)
def test_every_term_is_sharded_by_what_the_strategy_shards(llama, strategy, n):
    model, graph = llama
    each, state = _terms(graph, {"dp": n, **PLANS[strategy]})
    weights, grads, optimizer, temporaries, copies = _expected(strategy, n)
    P = model.params
    assert state.weights_bytes == pytest.approx(P * weights, abs=1)
    assert state.gradients_bytes == pytest.approx(P * grads, abs=1)
    assert state.optimizer_state_bytes == pytest.approx(P * optimizer, abs=1)
    assert state.temporaries_bytes == pytest.approx(P * temporaries, abs=1)
    assert P * each.weight_copies == pytest.approx(P * copies)


def test_fsdp_at_dp_64_is_a_few_gib_and_zero_2_at_dp_8_under_thirty(llama):
    # the two figures, by hand for Llama-2-7B (P = 6,738,415,616; Llama-3-70B alike), against the sharded
    # state the code holds
    model, graph = llama
    P = model.params
    fsdp64 = P * (4 + 4 + 8 + 4) / 64  # 2.11e9 bytes = 1.96 GiB (was 25.1 GiB of unsharded temporaries alone)
    zero2 = P * (2 + 2 / 8 + 12 / 8)  # 25.27e9 bytes = 23.53 GiB (was 72.7 GiB with float32 weights and copies)
    if LLAMA2_7B.params == P:
        assert fsdp64 / GIB == pytest.approx(1.96, abs=0.01) and zero2 / GIB == pytest.approx(23.53, abs=0.01)
    for plan, hand in (({"dp": 64, "fsdp": True}, fsdp64), ({"dp": 8, "zero_stage": 2}, zero2)):
        each, state = _terms(graph, plan)
        held = state.weights_bytes + state.gradients_bytes + state.optimizer_state_bytes + state.temporaries_bytes
        assert held + P * each.weight_copies == pytest.approx(hand, rel=1e-6), plan


def test_hybrid_shard_divides_by_its_group_and_shard_grad_op_holds_every_gathered_layer(llama):
    model, graph = llama
    # HYBRID_SHARD over dp 64 with groups of 8: FULL_SHARD's terms over 8, not 64
    _, hybrid = _terms(graph, {"dp": 64, "fsdp": True, "fsdp_strategy": "hybrid_shard", "shard_group": 8})
    _, full8 = _terms(graph, {"dp": 8, "fsdp": True})
    assert hybrid == full8
    # the gathered weights (bf16, 2 bytes) and one layer's gradients before their reduce-scatter (bf16 + the float32
    # reduce copy, 6 bytes): FULL_SHARD holds two layers and the root, SHARD_GRAD_OP every layer and the root
    each, _ = _terms(graph, {"dp": 8, "fsdp": True})
    per_label = {-1: model.V * model.h, -2: model.V * model.h + model.h, **{k: model.layer for k in range(model.L)}}
    assert mem.gathered_bytes(per_label, each, whole_step=False) == (2 * model.layer + model.root) * 2 + model.layer * 6
    assert mem.gathered_bytes(per_label, each, whole_step=True) == model.params * 2 + model.layer * 6


# What one Llama decoder layer's forward saves for its backward, in bf16, at batch b and sequence s (a heads, kv
# key/value heads of d = h / a), read off HF's LlamaDecoderLayer as the capture runs it (sdpa as the fused
# efficient-attention kernel, which takes the causal mask as a bf16 bias):
#   each RMSNorm: its float32 input 4bsh, rsqrt 4bs, the normalised bf16 input 2bsh, the output 2bsh -> 8bsh + 4bs
#   attention: q after RoPE 2bsh; k and v at all a heads (RoPE'd k and v for Llama-2, the GQA repeat of k and v for
#     Llama-3) 4bsh; the mask as a bf16 bias 2bs^2; the output 2bsh, its float32 log-sum-exp 4abs, seed and offset 16
#   MLP: gate, silu(gate), up and their product 2bsf each -> 8bsf
#   none:      24bsh + 8bsf + 2bs^2 + (8 + 4a)bs + 16 per layer
#   full:      the layer's input only, 2bsh
#   selective: the matmul and attention outputs (q 2bsh, k and v 2bs*kv*d each, attention 2bsh + 4abs + 16, o 2bsh,
#              gate and up 2bsf each, down 2bsh) -> 8bsh + 4bs*kv*d + 4bsf + 4abs + 16, and the layer's input 2bsh
# Outside the layers: RoPE's cos and sin 2 x 2bsd; the final norm 8bsh + 4bs; with checkpointing, the causal mask
# (bool, bs^2) that each layer's recompute reads again.
def _saved_by_hand(m, policy, b=B, s=S):
    h, f, a, d = m.h, m.f, m.a, m.h // m.a
    outside = 2 * 2 * b * s * d + 8 * b * s * h + 4 * b * s
    if policy == "none":
        return m.L * (24 * b * s * h + 8 * b * s * f + 2 * b * s * s + (8 + 4 * a) * b * s + 16) + outside
    if policy == "full":
        return m.L * 2 * b * s * h + outside + b * s * s
    selective = 8 * b * s * h + 4 * b * s * m.kv * d + 4 * b * s * f + 4 * a * b * s + 16
    return m.L * (selective + 2 * b * s * h) + outside + b * s * s


@pytest.mark.parametrize("policy", ["none", "full", "selective-op"])
def test_saved_activations_follow_the_checkpointing_policy(llama, policy):
    model, graph = llama
    step = recompute.apply(graph, policy)
    # e.g. Llama-2-7B, none: 32 x (24*32*4096 + 8*32*11008 + 2*32^2 + 136*32 + 16) + (8192 + 1,048,704)
    #      = 32 x 5,970,960 + 1,056,896 = 192,127,616 bytes
    assert mem.saved_activation_bytes(step, backward_start(step)) == _saved_by_hand(model, policy)


def test_the_llama_2_hand_count_at_4k_tokens():
    # the same formulas at batch 1 and 4,096 tokens: no checkpointing saves 32 x 797,474,832 bytes (0.74 GiB a layer,
    # the 32 MiB mask bias among them) and 130 MiB outside the layers, 23.89 GiB in all; full checkpointing keeps
    # 32 x 32 MiB of layer inputs, the 130 MiB and the 16 MiB boolean mask: 1.14 GiB
    none = _saved_by_hand(LLAMA2_7B, "none", s=4096)
    full = _saved_by_hand(LLAMA2_7B, "full", s=4096)
    assert none / GIB == pytest.approx(23.89, abs=0.01)
    assert full / GIB == pytest.approx(1.14, abs=0.01)


def test_tensor_parallel_8_with_sequence_parallelism_divides_a_layers_activations(llama):
    from perfpredict.parallel import tensor_parallel

    model, graph = llama
    t, b, s, h, f, a, d = 8, B, S, model.h, model.f, model.a, model.h // model.a
    rank = tensor_parallel.shard(graph, t, True).graph
    # sequence parallelism splits the norms' activations over t as well as the attention heads and the MLP:
    # (24bsh + 8bsf + (8 + 4a)bs) / t + 2bs^2 + 16 per layer (the mask is every rank's); outside: as above
    layer = (24 * b * s * h + 8 * b * s * f + (8 + 4 * a) * b * s) // t + 2 * b * s * s + 16
    outside = 2 * 2 * b * s * d + 8 * b * s * h + 4 * b * s
    assert mem.saved_activation_bytes(rank, backward_start(rank)) == model.L * layer + outside
    # its parameters: 1/8 of every projection, the norms whole, the vocabulary split (the shard scales the whole
    # model's totals by the share of the weights its ops read, to a few parameters in billions)
    per_rank = model.L * ((model.layer - 2 * h) // t + 2 * h) + 2 * model.V * h // t + h
    assert rank.trainable_param_count == pytest.approx(per_rank, rel=1e-6)


@pytest.mark.parametrize("llama", [LLAMA2_7B], indirect=True, ids=["llama2-7b"])  # one report: a few seconds
def test_a_fsdp_rank_at_dp_64_with_full_checkpointing_end_to_end(llama):
    from perfpredict.parallel import parallel_report

    model, graph = llama
    P, b, s = model.params, B, S
    report = parallel_report(
        graph,
        {"dp": 64, "fsdp": True},
        device="H100-SXM",
        predictor="analytical",
        precision="amp-bf16",
        activation_checkpointing="full",
    )
    m = report.stages[0].memory
    assert m.peak_at == "backward"
    assert m.weights_bytes == round(P * 4 / 64) + round(64 * 2 / 64)  # float32 shards; the bf16 buffer too
    assert (m.gradients_bytes, m.optimizer_state_bytes) == (round(P * 4 / 64), round(P * 8 / 64))
    assert m.optimizer_temporaries_bytes == 0  # the peak is the backward's: the step's temporaries come later
    # two layers and the root (with RoPE's 64-element inv_freq buffer) in bf16, one layer's gradients at 2 + 4 bytes
    assert m.gathered_weights_bytes == (2 * model.layer + model.root + 64) * 2 + model.layer * 6
    assert m.weight_copies_bytes == 0 and m.comm_buffers_bytes == 0
    # the activations: the layers' inputs that full checkpointing keeps, and one layer's recompute at a time beside
    # the loss's logits (float32 log-softmax of b x s x V): above the saved inputs, below them plus a layer and logits
    saved = _saved_by_hand(model, "full")
    one_layer = _saved_by_hand(model, "none") // model.L
    assert saved < m.activations_bytes < saved + 2 * one_layer + 3 * 4 * b * s * model.V
    assert report.stages[0].memory.total_bytes == report.peak_memory_bytes


@pytest.mark.parametrize("llama", [LLAMA2_7B], ids=["llama2-7b"], indirect=True)  # the rule is per parameter: one
def test_float8_all_gather_halves_the_gathered_bytes_and_the_all_gathers_traffic(llama):  # model shows it (70B: 60 s)
    from perfpredict.parallel import parallel_report

    model, graph = llama

    def fsdp_rank(**plan):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # memory advice
            return parallel_report(
                graph,
                {"dp": 64, "fsdp": True, **plan},
                device="H100-SXM",
                predictor="analytical",
                precision="amp-bf16",
                float8="tensorwise",
                activation_checkpointing="full",
            )

    bf16, fp8 = fsdp_rank(), fsdp_rank(float8_all_gather=True)
    # memory at the backward's peak: two layers and the root (with RoPE's 64-element inv_freq buffer) gathered, in
    # bf16 2 bytes a parameter, in float8 1; one layer's gradients before their reduce-scatter at 2 + 4 bytes either
    # way. Llama-2-7B: (2 x 202,383,360 + 262,148,096 + 64) x 2 + 202,383,360 x 6 = 2,548,129,920 bytes in bf16,
    # (...) x 1 + 1,214,300,160 = 1,881,215,040 in float8
    gathered = 2 * model.layer + model.root + 64
    (b,), (f,) = bf16.stages, fp8.stages
    assert b.memory.peak_at == f.memory.peak_at == "backward"
    assert b.memory.gathered_weights_bytes == gathered * 2 + model.layer * 6
    assert f.memory.gathered_weights_bytes == gathered * 1 + model.layer * 6
    assert "gathered layers in 1 bytes per parameter" in fp8.assumptions["memory"]
    assert fp8.plan["float8_all_gather"] and not bf16.plan["float8_all_gather"]

    def collective(report, kind, phase):
        (c,) = [c for c in report.collectives if (c.group, c.kind, c.phase) == ("dp", kind, phase)]
        return c

    # the backward re-gathers each of the L layers once per step: L calls of a layer's parameters, 2 bytes each in
    # bf16 (Llama-2-7B: 32 x 404,766,720 bytes), 1 in float8 (32 x 202,383,360)
    back_b, back_f = collective(bf16, "all_gather", "backward"), collective(fp8, "all_gather", "backward")
    assert (back_b.calls_per_step, back_b.bytes_per_call) == (model.L, model.layer * 2)
    assert (back_f.calls_per_step, back_f.bytes_per_call) == (model.L, model.layer * 1)
    # the forward gathers the root once and every layer: the same parameters, half the bytes
    fwd_b, fwd_f = collective(bf16, "all_gather", "forward"), collective(fp8, "all_gather", "forward")
    assert fwd_b.calls_per_step == fwd_f.calls_per_step == model.L + 1
    assert fwd_b.bytes_per_step == 2 * fwd_f.bytes_per_step
    # the all-gather's time: half the bytes on the wire, the same per-call latency, so less than bf16's, more than
    # half of it; the gradients' reduce-scatter is not float8's and moves as many bytes
    for b16, f8 in ((back_b, back_f), (fwd_b, fwd_f)):
        assert f8.time_ms_per_step < b16.time_ms_per_step < 2 * f8.time_ms_per_step
    rs_b, rs_f = collective(bf16, "reduce_scatter", "backward"), collective(fp8, "reduce_scatter", "backward")
    assert rs_b.bytes_per_step == rs_f.bytes_per_step


@pytest.mark.parametrize("model", [LLAMA2_7B, LLAMA3_70B], ids=["llama2-7b", "llama3-70b"])
def test_qlora_on_one_gpu_by_hand(model):
    from perfpredict.core.graph import OpGraph
    from perfpredict.hardware.precision import HeldOptions, training_bytes

    h, f, kv, d, L = model.h, model.f, model.kv, model.h // model.a, model.L
    # LoRA rank 16 on all seven linears: r x (in + out) each; q and o: h + h, k and v: h + kv*d, gate and up: h + f,
    # down: f + h. Llama-2-7B: 16 x (2 x 8192 + 2 x 8192 + 3 x 15104) = 1,249,280 a layer, 39,976,960 in all
    adapters = L * 16 * (2 * 2 * h + 2 * (h + kv * d) + 3 * (h + f))
    base_linears = L * (model.layer - 2 * h)  # the NF4 weights: every linear of the layers
    rest = model.params - base_linears  # embedding, head and norms, frozen in bf16
    step = OpGraph(
        (), (), phase="training", param_count=model.params + adapters, trainable_param_count=adapters, dtype="bfloat16"
    )
    held = training_bytes(step, "training", "adamw", "amp-bf16", HeldOptions(nf4_params=base_linears))
    # float32 adapters with float32 gradients and two AdamW states; the base at 4.127 bits, the rest at 2 bytes
    assert held.params == adapters * 4 + round(base_linears * 4.127 / 8 + rest * 2)
    assert (held.gradients, held.optimizer_state, held.weight_copies) == (adapters * 4, adapters * 8, adapters * 2)
    # Llama-2-7B: 6,476,267,520 NF4 weights are 3.11 GiB; Llama-3-70B: 68,451,041,280 are 32.89 GiB
    nf4_gib = {LLAMA2_7B: 3.11, LLAMA3_70B: 32.89}[model]
    assert base_linears * 4.127 / 8 / GIB == pytest.approx(nf4_gib, abs=0.01)
