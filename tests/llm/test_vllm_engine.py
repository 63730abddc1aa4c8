"""The vLLM-class engine: its model sizes, paged KV arithmetic, CUDA-graph buckets, tensor-parallel shards, the
refusals vLLM would give, and whole answers."""

from __future__ import annotations

import pytest

from perfpredict.core.errors import InvalidInputError, UnknownModelError
from perfpredict.core.units import GIB, MIB
from perfpredict.hardware.devices import get_device
from perfpredict.llm import paged_kv, vllm_engine
from perfpredict.llm.decoder_spec import spec_from
from perfpredict.llm.engine_graph import Numerics, StepShape, rank_shape, step_graph, weight_elements
from perfpredict.llm.vllm_config import EngineConfig, attention_backend, capture_bucket, paged_attention_kernel, resolve


@pytest.mark.parametrize(
    "model, params",
    [  # the published parameter counts (the shipped configs' test checks the same against transformers' models)
        ("llama-2-7b", 6_738_415_616),
        ("llama-2-70b", 68_976_648_192),
        ("llama-3-8b", 8_030_261_248),
        ("mixtral-8x7b", 46_702_792_704),
        ("qwen2-7b", 7_615_616_512),
        ("qwen2-72b", 72_706_203_648),
    ],
)
def test_the_engine_reads_each_shipped_llm_to_its_exact_parameter_count(model, params):
    spec = spec_from(model)
    assert spec.params() == params
    assert sum(weight_elements(spec, rank_shape(spec, 1))) == params


def test_the_config_switches_a_sliding_window_on_and_off_and_unknown_families_are_refused():
    assert spec_from("mistral-7b").window == 4096
    assert spec_from("qwen2-7b").window is None  # declared, but use_sliding_window is false
    with pytest.raises(UnknownModelError, match="use --engine hf"):
        spec_from("bert-base-uncased")


def test_paged_kv_blocks_come_from_the_memory_left_after_weights_activations_and_runtime():
    spec = spec_from("llama-2-7b")
    rank = rank_shape(spec, 1)
    assert paged_kv.block_bytes(32, 32, 128, 16, "float16") == 2 * 16 * 32 * 128 * 32 * 2  # 8 MiB
    h100 = get_device("H100-SXM")
    plan = paged_kv.plan(spec, rank, device=h100, utilization=0.9, weights_bytes=13 * GIB, activation_bytes=GIB,
                         runtime_bytes=GIB, block_size=16, kv_dtype="float16")  # fmt: skip
    free = int(h100.memory_bytes * 0.9) - 15 * GIB
    assert plan.blocks == free // (8 * MIB) and plan.capacity_tokens == plan.blocks * 16
    assert plan.blocks_for(2048) == 128 and plan.blocks_for(2049) == 129
    assert plan.max_seqs_at(4096) == plan.blocks // 256
    # the start-up forward's peak: 4,096 tokens x (residual + normed + gate/up out + SiLU out) in fp16, then
    # 256 sequences' logits (fp16 gathered, fp32 probabilities, the sampler's sorted values and indices)
    act = paged_kv.profile_activation_bytes(spec, rank, 4096, 256, "float16")
    assert act == 4096 * (2 * 4096 + 3 * 11008) * 2 + 256 * 32000 * (2 + 4 + 4 + 8)


def test_vllm_refuses_what_does_not_fit_in_one_line_with_the_fix():
    from perfpredict.llm.generation import predict_generation

    with pytest.raises(InvalidInputError, match=r"does not fit: each of 1 GPU\(s\) needs .* what makes room") as err:
        predict_generation("llama-2-70b", device="H100-SXM", engine="vllm")
    # each remedy with what one GPU then needs before its KV cache: --tp 2's is the tp-2 engine's own
    kv = vllm_engine.setup("llama-2-70b", device="H100-SXM", tp=2).kv
    need_gib = (kv.weights_bytes + kv.activation_bytes + kv.runtime_bytes) / GIB
    assert f"--tp 2 (splits the weights over 2 GPUs): about {need_gib:.1f} GiB per GPU" in str(err.value)
    # the H100 computes in fp8, the same size as int8, so int8 is not offered beside it; int4 is smaller still
    assert "--weights fp8 (the layers' weights in 1 byte each)" in str(err.value)
    assert "--weights int4" in str(err.value) and "int8" not in str(err.value)
    # Qwen2-7B's 131,072 positions without chunked prefill: the start-up profile's activations leave an A100-40GB
    # too little KV cache for one sequence of max_model_len, which is what vLLM says at start-up
    with pytest.raises(InvalidInputError, match="vLLM would not start: max_model_len 131072"):
        predict_generation("qwen2-7b", device="A100-40GB", engine="vllm", engine_version="0.6",
                           engine_config=EngineConfig(chunked_prefill=False))  # fmt: skip
    with pytest.raises(InvalidInputError, match="beyond the model's 4096 positions"):
        predict_generation("llama-2-7b", prompt_tokens=4000, new_tokens=200, engine="vllm")


def test_decode_batches_replay_the_captured_graph_of_the_next_size_up_and_run_eagerly_above():
    assert [capture_bucket(b, 256) for b in (1, 2, 3, 5, 8, 9, 33, 250, 256)] == [1, 2, 4, 8, 8, 16, 40, 256, 256]
    assert capture_bucket(257, 256) is None and capture_bucket(21, 20) == 24 and capture_bucket(25, 20) is None


def test_the_decode_step_costs_its_padded_bucket_under_cuda_graphs_and_its_own_batch_eagerly():
    from perfpredict.llm.vllm_engine import setup

    graphs = setup("llama-2-7b", device="H100-SXM").costs
    eager = setup("llama-2-7b", device="H100-SXM", engine=EngineConfig(enforce_eager=True)).costs
    # 33 sequences replay the graph captured for 40; the dense part is the same, attention over 33 contexts of 2
    assert graphs.decode_s(33, 66, 2) == pytest.approx(graphs.decode_s(40, 80, 2), rel=0.01)
    assert graphs.decode_s(41, 82, 2) > graphs.decode_s(40, 80, 2)
    assert eager.decode_s(33, 66, 2) < eager.decode_s(40, 80, 2)
    assert eager.decode_s(1, 512, 512) > graphs.decode_s(1, 512, 512)  # eager launches every kernel from Python


def test_the_attention_backend_and_paged_attention_kernel_follow_vllm_0_6():
    h100, v100 = get_device("H100-SXM"), get_device("V100")
    assert attention_backend(16, None, 128, "float16", "float16", h100)[0] == "flash_attn"
    assert attention_backend(16, 4096, 128, "float16", "float16", h100)[0] == "xformers"  # sliding window
    assert attention_backend(16, None, 128, "float8_e4m3fn", "float16", h100)[0] == "xformers"  # fp8 KV cache
    assert attention_backend(16, None, 128, "float16", "float16", v100)[0] == "xformers"  # before Ampere
    assert paged_attention_kernel(16, 32, 2048) == "v2"  # 512 sequence-heads: not more than 512
    assert paged_attention_kernel(32, 32, 2048) == "v1"
    assert paged_attention_kernel(32, 32, 10_000) == "v2" and paged_attention_kernel(1, 32, 400) == "v1"


def test_chunked_prefill_is_vllm_0_6s_default_only_over_32k_tokens_without_a_window():
    h100 = get_device("H100-SXM")

    def chunked(model: str) -> tuple[bool, int]:
        s = spec_from(model)
        e = resolve(EngineConfig(), max_positions=s.max_positions, window=s.window, head_dim=s.head_dim,
                    kv_dtype="float16", dtype="float16", device=h100)  # fmt: skip
        return e.chunked_prefill, e.max_num_batched_tokens

    assert chunked("llama-2-7b") == (False, 4096)  # max(max_model_len, 2048)
    assert chunked("qwen2-7b") == (True, 512)  # 131,072 positions, no window
    assert chunked("mistral-7b") == (False, 32768)  # 32,768 positions, but a sliding window


def test_tensor_parallel_ranks_split_heads_features_and_vocabulary_as_vllm_does():
    spec = spec_from("llama-2-70b")  # 64 heads, 8 key/value heads, 28,672 intermediate features, 32,000 words
    assert rank_shape(spec, 4) == rank_shape(spec, 4).__class__(4, 16, 2, 7168, 8000)
    assert rank_shape(spec, 16).kv_heads == 1  # fewer key/value heads than ranks: each rank holds a replica
    with pytest.raises(
        InvalidInputError, match=r"tp=3 does not split the 64 attention heads .* choose tp from 1, 2, 4, 8"
    ):
        rank_shape(spec, 3)
    one, four = (sum(weight_elements(spec, rank_shape(spec, tp))) for tp in (1, 4))
    assert four == pytest.approx(one / 4, rel=0.001)  # only the norms are not split


def test_each_tp_step_adds_two_all_reduces_per_block_the_embeddings_and_the_logits_gather():
    from perfpredict.llm import custom_allreduce
    from perfpredict.llm.vllm_engine import setup
    from perfpredict.parallel import measured_collectives

    s = setup("llama-2-70b", device="H100-SXM", tp=4)
    act = 8 * 8192 * 2  # 8 tokens x hidden x fp16 = 128 KiB: under 512 KiB on 4 GPUs, vLLM's one-shot kernel
    logits = 8 * 8000 * 4 * 2  # gathered by NCCL: the measured 4-GPU all-reduce curve, half its bytes on the wire
    gather = measured_collectives.curve("all_reduce", 4, "H100-SXM").scaled(1.0, (3 / 4) / (2 * 3 / 4), "")
    expected = 161 * custom_allreduce.seconds(act, 4, "H100-SXM") + gather.seconds(logits)
    assert s.costs.collectives_s(8, 8) == pytest.approx(expected)
    assert setup("llama-2-7b", device="H100-SXM").costs.collectives_s(8, 8) == 0.0


def test_a_rank_graph_holds_its_share_of_every_kernel():
    spec = spec_from("llama-3-8b")
    num = Numerics("bfloat16", "bfloat16", 2.0)
    one = step_graph(spec, rank_shape(spec, 1), StepShape(4, 1, 1000), num)
    two = step_graph(spec, rank_shape(spec, 2), StepShape(4, 1, 1000), num)
    qkv = next(n for n in one.nodes if n.module_path.endswith("layers.0.self_attn.qkv_proj"))
    assert qkv.outputs[0].shape == (4, (32 + 2 * 8) * 128) and qkv.flops == 2 * 4 * 6144 * 4096
    attn = next(n for n in one.nodes if n.op == "attention")
    kv_read = 2 * 4 * 8 * 1000 * 128 * 2  # K and V of 4 sequences, 8 heads, 1,000 tokens
    assert attn.bytes_read == 4 * 32 * 128 * 2 + kv_read
    assert two.param_bytes == pytest.approx(one.param_bytes / 2, rel=0.001)
    assert len(one.nodes) == len(two.nodes)  # one kernel each, on smaller shapes


def test_the_answer_has_ttft_per_token_time_tokens_per_s_memory_per_gpu_and_the_largest_batch():
    from perfpredict.llm.generation import predict_generation

    r = predict_generation("llama-2-70b", device="H100-SXM", engine="vllm", engine_version="0.6", tp=4,
                           prompt_tokens=1024, new_tokens=256)  # fmt: skip
    assert r.engine == "vllm" and r.engine_version == "0.6" and r.tp == 4 and r.fits
    assert 0 < r.ttft_ms < r.e2e_ms and r.tpot_mean_ms > 0 and r.tokens_per_s > 0
    assert r.peak_memory_bytes == pytest.approx(0.9 * r.device_memory_bytes, rel=0.01)  # vLLM takes its share
    blocks_per_seq = -(-1280 // 16)
    assert r.max_batch == min(256, r.kv_pool_bytes // (blocks_per_seq * 2 * 16 * 2 * 128 * 80 * 2))
    assert r.tp_communication_ms > 0 and r.decode_steps == 255 and r.prefill_steps == 1


def test_a_batch_beyond_the_kv_pool_is_preempted_and_tokens_per_s_flattens():
    from perfpredict.llm.generation import predict_generation

    r = predict_generation("llama-2-7b", device="A100-40GB", engine="vllm", engine_version="0.6", batch=64,
                           prompt_tokens=2048, new_tokens=2048)  # fmt: skip
    assert r.max_batch < 64 and r.preemptions > 0 and r.warnings and "preemption" in r.warnings[0]
    sweep = {p.batch: p.tokens_per_s for p in r.batch_sweep}
    assert sweep[8] > 4 * sweep[1]  # memory-bound: more sequences are nearly free while the pool holds them
    assert sweep[64] < 1.2 * sweep[16]  # past the pool (11 sequences of 4,096 tokens), they wait their turn
    assert [p.fits for p in r.batch_sweep] == [p.batch <= r.max_batch for p in r.batch_sweep]


def test_weight_formats_and_an_fp8_kv_cache_change_what_each_step_reads():
    from perfpredict.llm.generation import predict_generation

    base = predict_generation("llama-3-8b", device="H100-SXM", engine="vllm", new_tokens=32, dtype="float16")
    int4 = predict_generation("llama-3-8b", device="H100-SXM", engine="vllm", new_tokens=32, dtype="float16",
                              weights="int4")  # fmt: skip
    fp8kv = predict_generation("llama-3-8b", device="H100-SXM", engine="vllm", new_tokens=32, dtype="float16",
                               kv_dtype="float8_e4m3fn", engine_version="0.6")  # fmt: skip
    assert int4.weights_bytes < 0.4 * base.weights_bytes and int4.tpot_mean_ms < base.tpot_mean_ms
    assert fp8kv.kv_capacity_tokens > 1.9 * base.kv_capacity_tokens
    assert "xformers" in fp8kv.assumptions["attention"]


def test_auto_picks_the_engine_that_applies_and_mixing_their_settings_is_refused():
    from perfpredict.llm.generation import choose_engine, predict_generation

    assert choose_engine("auto", "llama-2-7b", "H100-SXM", None, None) == "vllm"
    assert choose_engine("auto", "llama-2-7b", "H100-SXM", "eager", None) == "hf"
    assert choose_engine("auto", "llama-2-7b", "cpu", None, None) == "hf"
    assert choose_engine("auto", "bert-base-uncased", "H100-SXM", None, None) == "hf"
    with pytest.raises(
        InvalidInputError,
        match="--mode, --cache, --quant-kernel and --attn-implementation describe transformers' generate",
    ):
        predict_generation("llama-2-7b", engine="vllm", mode="compiled")
    with pytest.raises(InvalidInputError, match="apply to serving engines only"):
        predict_generation("gpt2", engine="hf", engine_config=EngineConfig())
    with pytest.raises(InvalidInputError, match="runs on CUDA GPUs"):
        predict_generation("llama-2-7b", engine="vllm", device="cpu")


def test_generate_cli_asks_the_engine_with_its_settings_and_refuses_a_bad_tp_in_one_line(tmp_path, capsys):
    import json

    from perfpredict.cli import main

    out = tmp_path / "g.json"
    argv = ["generate", "--hf", "llama-2-70b", "--engine", "vllm", "--tp", "4", "--device", "H100", "--json", str(out)]
    assert main([*argv, "--gpu-memory-utilization", "0.8", "--max-num-seqs", "64", "--block-size", "32"]) == 0
    report = json.loads(out.read_text())
    assert report["tp"] == 4 and report["engine"] == "vllm" and report["max_batch"] <= 64
    assert "block size 32, memory share 0.8, max_num_seqs 64" in report["assumptions"]["engine"]
    capsys.readouterr()
    assert main(["generate", "--hf", "llama-2-7b", "--tp", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tp=3 does not split the 32 attention heads" in err[0] and "1, 2, 4, 8" in err[0]


def test_decode_attention_streams_the_kv_cache_never_faster_than_the_gpus_bandwidth():
    from perfpredict.llm.vllm_engine import setup

    costs = setup("llama-2-7b", device="H100-SXM").costs
    h100 = get_device("H100-SXM")
    small, big = (costs._decode_attention(64, c, c, "cuda_graph") for c in (1024, 4096))
    kv = 2 * 64 * 4096 * 32 * 128 * 2 * 32  # K and V of 64 sequences of 4,096 tokens, every layer, fp16
    assert big >= kv / h100.memory_bandwidth_bytes_per_s  # the roofline: every cached byte is read once
    assert big == pytest.approx(4 * small, rel=0.15)  # memory-bound: 4x the context, 4x the time


def test_decode_alone_counts_the_sequences_running_together_never_more_than_the_kv_cache_holds():
    # issue 45, item 4: decode alone was batch / TPOT, though the KV pool holds fewer sequences than the batch
    # (Llama-70B at tp 2 and batch 128: 2,462 tokens/s against 685 overall; batch 100,000: 1.67 M tokens/s)
    from perfpredict.llm.generation_options import EngineOptions
    from perfpredict.llm.render_generation import summary_rows
    from perfpredict.llm.vllm_engine import predict_vllm

    r = predict_vllm("llama-2-7b", device="L4", batch=64, prompt_tokens=1024, new_tokens=32, sweep=False,
                     options=EngineOptions(engine="vllm", version="0.6"))  # fmt: skip
    # the pool holds 13,792 tokens: 862 blocks of 16, 66 blocks a sequence of 1,056 tokens, 13 sequences at once
    assert r.kv_capacity_tokens // 16 // -(-(1024 + 32) // 16) == r.max_batch == r.running_batch == 13
    assert r.decode_tokens_per_s == pytest.approx(13 * 1000 / r.tpot_mean_ms)  # not 64 x 1000 / TPOT
    assert r.decode_tokens_per_s <= r.kv_capacity_tokens / (1024 + 32) * 1000 / r.tpot_mean_ms
    assert r.decode_tokens_per_s < 2 * r.tokens_per_s  # was 64 / 13 = 4.9 x the share the pool allows
    detail = dict((m, d) for m, _, d in summary_rows(r))["Tokens/s"]
    assert "13 sequences decoding together, as many as the KV cache holds" in detail
