"""LLM generation: KV cache bytes, weight formats, decode traces with a real cache, the fit search, the CLI."""

from __future__ import annotations

import copy
import json
import warnings

import pytest

from perfpredict.cli import main
from perfpredict.compiler_hooks import hf_frontend as hf
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.units import GIB
from perfpredict.hardware.devices import get_device
from perfpredict.llm import kv_cache, weight_formats
from perfpredict.llm.decode_trace import decode_graph, prefill_graph


def _layers(model_id: str, n: int):
    config = copy.deepcopy(hf.load_config(model_id))
    config.num_hidden_layers = n
    return config


def test_kv_cache_bytes_are_exact_for_mha_gqa_with_a_window_and_moe():
    llama = kv_cache.kv_geometry(hf.load_config("llama-2-7b"))
    assert kv_cache.kv_cache_bytes(llama, 4096, 3, "float16") == 2 * 32 * 32 * 128 * 4096 * 3 * 2
    mistral = kv_cache.kv_geometry(hf.load_config("mistral-7b"))  # GQA (8 KV heads) and a 4,096-token window
    assert mistral.kv_heads == 8 and set(mistral.windows) == {4096}
    assert kv_cache.kv_cache_bytes(mistral, 1000, 2, "bfloat16") == 2 * 32 * 8 * 128 * 1000 * 2 * 2
    assert kv_cache.kv_cache_bytes(mistral, 10_000, 2, "bfloat16") == 2 * 32 * 8 * 128 * 4096 * 2 * 2
    mixtral = kv_cache.kv_geometry(
        hf.config_from_dict(
            {
                "model_type": "mixtral",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_hidden_layers": 32,
                "intermediate_size": 14336,
                "num_local_experts": 8,
                "num_experts_per_tok": 2,
                "vocab_size": 32000,
                "sliding_window": None,
            },
            "mixtral-style",
        )
    )
    assert kv_cache.kv_cache_bytes(mixtral, 2048, 1, "float8_e4m3fn") == 2 * 32 * 8 * 128 * 2048 * 1 * 1


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_a_decode_step_attends_to_the_cache_and_copied_layers_match_the_whole_trace(cache):
    config = _layers("llama-2-7b", 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = decode_graph(config, batch=2, context=100, dtype="bfloat16", cache=cache, max_cache_len=160)
        whole = decode_graph(
            config, batch=2, context=100, dtype="bfloat16", cache=cache, max_cache_len=160, replicate=False
        )
    keys = {n.inputs[1].shape[2] for n in fast.nodes if n.op == "attention"}
    assert keys == ({101} if cache == "dynamic" else {160})  # the new token joins 100 cached ones
    assert [(n.op, n.flops, n.bytes_read) for n in fast.nodes] == [(n.op, n.flops, n.bytes_read) for n in whole.nodes]
    assert set(fast.edges) == set(whole.edges) and fast.param_count == whole.param_count
    assert fast.keep_alive == whole.keep_alive  # every layer's new K and V leave the step, not the last layer's
    longer = decode_graph(config, batch=2, context=400, dtype="bfloat16")
    assert longer.total_bytes > fast.total_bytes  # a longer cache is read every step


def test_weight_formats_change_the_bytes_each_layer_matmul_reads():
    config = _layers("llama-2-7b", 2)
    h100, a100 = get_device("H100-SXM"), get_device("A100-80GB")
    graph = decode_graph(config, batch=1, context=64, dtype="bfloat16", replicate=False)
    linears = weight_formats.quantized_linears(graph)
    layer_params = sum(graph.nodes[i].params for i in linears)
    assert layer_params == 2 * (4 * 4096 * 4096 + 3 * 4096 * 11008)  # q, k, v, o and the MLP, per layer
    nf4 = weight_formats.apply(graph, weight_formats.FORMATS["nf4"], h100, many_tokens=False)
    assert graph.param_bytes - nf4.param_bytes == pytest.approx(layer_params * (2 - 0.5 - 4 / 64), abs=8)
    i = linears[0]
    assert nf4.nodes[i].bytes_read == pytest.approx(graph.nodes[i].bytes_read - graph.nodes[i].params * 1.4375, abs=2)
    # dequantize-then-GEMM: a dequantize op reads the compressed weight and writes a bf16 copy, which the GEMM reads
    prefill = weight_formats.apply(graph, weight_formats.FORMATS["nf4"], h100, many_tokens=True)
    assert len(prefill.nodes) == len(graph.nodes) + len(linears) and prefill.param_bytes == nf4.param_bytes
    dequantize, gemm = prefill.nodes[i], prefill.nodes[i + 1]
    assert dequantize.target == "dequantize_nf4" and (i, i + 1) in prefill.edges
    assert dequantize.bytes_read == pytest.approx(graph.nodes[i].params * 0.5625, abs=2)
    assert dequantize.bytes_written == 2 * graph.nodes[i].params and gemm.bytes_read == graph.nodes[i].bytes_read
    assert prefill.total_bytes == pytest.approx(nf4.total_bytes + 4 * layer_params, abs=len(linears) * 2)
    fp8 = weight_formats.FORMATS["fp8"]
    assert weight_formats.route(fp8, h100) == "native" and weight_formats.route(fp8, a100) == "weight-only"
    with pytest.raises(InvalidInputError, match="needs a CUDA GPU"):
        weight_formats.check("nf4", get_device("cpu"))
    with pytest.raises(InvalidInputError, match="no bfloat16 hardware"):
        weight_formats.check("bf16", get_device("V100"))


@pytest.mark.slow
def test_llama_2_7b_decode_is_never_faster_than_streaming_its_weights_and_the_fit_search_holds():
    from perfpredict.llm.generation import predict_generation

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = predict_generation(
            "llama-2-7b", prompt_tokens=128, new_tokens=32, device="H100-SXM", dtype="bfloat16", mode="cuda_graph"
        )
    h100 = get_device("H100-SXM")
    first = r.decode_points[0]
    assert first.weight_streaming_ms == pytest.approx(r.weights_bytes / h100.memory_bandwidth_bytes_per_s * 1e3)
    assert first.device_ms >= first.weight_streaming_ms  # physics: every weight is read once per step
    assert r.weights_bytes / GIB == pytest.approx(12.55, abs=0.05)
    assert r.kv_cache_bytes == 2 * 32 * 32 * 128 * 160 * 2
    per_seq = (r.kv_cache_bytes + r.activations_bytes) / r.batch
    fixed = r.weights_bytes + r.runtime_bytes
    assert fixed + per_seq * r.max_batch <= h100.memory_bytes < fixed + per_seq * (r.max_batch + 1)
    assert (
        r.ttft_ms > 0
        and r.tpot_first_ms <= r.tpot_last_ms
        and r.e2e_ms == pytest.approx(r.ttft_ms + r.tpot_mean_ms * 31, rel=1e-9)
    )
    sweep = {p.batch: p for p in r.batch_sweep}
    assert sweep[8].tokens_per_s > 4 * sweep[1].tokens_per_s  # memory-bound: a bigger batch is nearly free
    assert [p.fits for p in r.batch_sweep] == [p.batch <= r.max_batch for p in r.batch_sweep]


def test_prefill_keeps_the_last_positions_logits_only():
    config = _layers("gpt2", 2)
    config.n_layer = 2
    graph = prefill_graph(config, batch=2, prompt=64, dtype="float32", replicate=False)
    head = [n for n in graph.nodes if "lm_head" in n.module_path]
    assert head and head[-1].outputs[0].shape[-2:] == (1, config.vocab_size)
    # every op's module path as GPT-2 names it (the wrapper that asks for the last logits is not in it)
    assert head[-1].module_path == "lm_head" and any(n.module_path.startswith("transformer.h.1.") for n in graph.nodes)
    assert not any(n.module_path.startswith("m.") for n in graph.nodes)


def test_generate_cli_answers_and_refuses_bad_questions_in_one_line(tmp_path, capsys):
    out, page = tmp_path / "g.json", tmp_path / "g.html"
    assert (
        main(
            [
                "generate",
                "--hf",
                "gpt2",
                "--prompt-tokens",
                "32",
                "--new-tokens",
                "8",
                "--device",
                "L4",
                "--engine",
                "hf",
                "--json",
                str(out),
                "--html",
                str(page),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["new_tokens"] == 8 and report["tokens_per_s"] > 0 and report["batch_sweep"]
    assert report["engine"] == "hf" and report["cache"] == "dynamic" and report["mode"] == "eager"
    assert "<svg" in page.read_text()
    capsys.readouterr()
    for argv, message in (
        (["--new-tokens", "0"], "generate at least one token"),
        (["--prompt-tokens", "1000", "--new-tokens", "100"], "beyond the model's 1024 positions"),
        (["--weights", "nf4", "--device", "cpu"], "needs a CUDA GPU"),
    ):
        assert main(["generate", "--hf", "gpt2", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_a_moe_decode_step_streams_the_experts_its_batch_reaches():
    from perfpredict.llm import moe
    from perfpredict.llm.generation import _decode_graph

    config = hf.config_from_dict(
        {
            "model_type": "mixtral",
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_hidden_layers": 3,
            "intermediate_size": 512,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "vocab_size": 1000,
            "sliding_window": None,
            "max_position_embeddings": 4096,
        },
        "mixtral-tiny",
    )
    assert moe.expected_experts(8, 2, 1) == pytest.approx(2.0) and moe.expected_experts(8, 2, 1000) == pytest.approx(8)
    h100 = get_device("H100-SXM")
    fmt = weight_formats.FORMATS["bf16"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = decode_graph(config, batch=1, context=16, dtype="bfloat16")
        one = _decode_graph(config, h100, fmt, "dynamic", 1, 16, "bfloat16")
    grouped = [i for i, n in enumerate(raw.nodes) if n.target == "_grouped_mm"]
    assert grouped and all(raw.nodes[i].flops > 0 for i in grouped)  # the expert GEMMs are costed, not unknown
    i = grouped[0]
    weight = raw.nodes[i].inputs[1].nbytes
    assert raw.nodes[i].bytes_read - one.nodes[i].bytes_read == pytest.approx(weight * (1 - 2 / 8), abs=2)


def test_float32_generation_keeps_float32_weights():
    from perfpredict.llm.generation import predict_generation

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = predict_generation("gpt2", prompt_tokens=16, new_tokens=4, device="V100", dtype="float32", engine="hf")
    assert r.weights == "fp32" and r.dtype == "float32"
    assert r.weights_bytes == pytest.approx(124_439_808 * 4, rel=0.01)  # GPT-2's parameters, 4 bytes each


def test_the_hf_engine_splits_weights_and_cache_over_tensor_parallel_gpus_and_refuses_a_bad_tp():
    from perfpredict.llm.generation import predict_generation

    ask = dict(prompt_tokens=32, new_tokens=4, device="A100-80GB", engine="hf", mode="cuda_graph", cache="static")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one, two = (predict_generation("gpt2", tp=tp, **ask) for tp in (1, 2))
    assert two.tp == 2 and two.kv_cache_bytes == one.kv_cache_bytes // 2  # 12 heads: 6 per GPU
    assert two.weights_bytes == pytest.approx(one.weights_bytes / 2, rel=0.02)  # all but the norms and positions
    assert one.tp_communication_ms == 0 and two.tp_communication_ms > 0  # the all-reduces on the critical path
    assert "tensor parallel" in two.assumptions
    # the module is named as GPT-2 names it, not with the traced wrapper's "m." in front
    with pytest.raises(InvalidInputError, match=r"tp=5 does not split the 12 attention heads of transformer\.h\.0\."):
        predict_generation("gpt2", tp=5, **ask)


def test_a_cuda_graph_mode_takes_the_static_cache_and_refuses_a_dynamic_one(capsys):
    """A CUDA graph replays fixed shapes; HF's dynamic cache grows every step, so it is never captured."""
    from perfpredict.cli import main
    from perfpredict.llm.generation import hf_mode_and_cache, predict_generation

    assert hf_mode_and_cache("cuda_graph", None) == ("cuda_graph", "static")
    assert hf_mode_and_cache("compiled_cuda_graph", None) == ("compiled_cuda_graph", "static")
    assert hf_mode_and_cache(None, None) == ("eager", "dynamic")
    assert hf_mode_and_cache("compiled", None) == ("compiled", "static")  # as transformers recommends
    assert hf_mode_and_cache("compiled", "dynamic") == ("compiled", "dynamic")  # allowed, with a warning
    for mode in ("cuda_graph", "compiled_cuda_graph"):
        with pytest.raises(InvalidInputError, match=f"--mode {mode} cannot run with --cache dynamic.*--cache static"):
            predict_generation("gpt2", prompt_tokens=16, new_tokens=4, device="H100", mode=mode, cache="dynamic")
    argv = ["generate", "--hf", "gpt2", "--device", "H100", "--mode", "cuda_graph", "--cache", "dynamic"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "static cache" in err[0]


def test_compiled_with_a_dynamic_cache_warns_and_a_graph_mode_reports_its_static_cache():
    from perfpredict.llm.generation import predict_generation

    ask = dict(prompt_tokens=16, new_tokens=4, device="H100", engine="hf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamic = predict_generation("gpt2", mode="compiled", cache="dynamic", **ask)
        compiled = predict_generation("gpt2", mode="compiled", **ask)
        graphed = predict_generation("gpt2", mode="compiled_cuda_graph", **ask)
    assert dynamic.cache == "dynamic" and any("recompiles" in w for w in dynamic.warnings)
    assert compiled.cache == graphed.cache == "static" and not compiled.warnings and not graphed.warnings
    assert "static cache" in graphed.assumptions["kv cache"]
    assert graphed.tpot_mean_ms <= compiled.tpot_mean_ms  # a CUDA graph never makes the step slower


def test_a_host_bound_decode_step_is_labelled_host_not_memory():
    """Eager decode of a small model is launch-bound: flat from batch 1 to 16, and the table says "host"."""
    from perfpredict.llm.generation import predict_generation
    from perfpredict.llm.render_generation import bound_line, render_generation_html, sweep_rows

    ask = dict(prompt_tokens=16, new_tokens=4, device="H100", engine="hf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager, graphed = (predict_generation("gpt2", mode=m, **ask) for m in ("eager", "cuda_graph"))
    sweep = {p.batch: p for p in eager.batch_sweep}
    assert sweep[16].step_ms == pytest.approx(sweep[1].step_ms, rel=0.05)  # flat: the GPU waits for the host
    assert all(sweep[b].bound == "host" for b in (1, 2, 4, 8, 16))
    assert [row[3] for row in sweep_rows(eager)][:5] == ["host"] * 5
    assert "host-bound" in bound_line(eager) and "--mode cuda_graph" in bound_line(eager)
    assert "host-bound" in render_generation_html(eager)
    assert not any(p.host_bound for p in graphed.batch_sweep)  # one graph launch per step
    assert {p.bound for p in graphed.batch_sweep} <= {"memory", "compute"}


def test_nf4_decode_is_fused_at_batch_1_and_dequantizes_whole_weights_for_more_rows():
    """bitsandbytes runs its 4-bit gemv for a one-row input only; more rows dequantize each weight first."""
    from perfpredict.llm import weight_formats
    from perfpredict.llm.generation import predict_generation

    nf4, int4, h100 = weight_formats.FORMATS["nf4"], weight_formats.FORMATS["int4"], get_device("H100")
    assert weight_formats.kernel_for(nf4, h100, prefill=False, rows=1) == "fused"
    assert weight_formats.kernel_for(nf4, h100, prefill=False, rows=2) == "dequantize"
    assert weight_formats.kernel_for(int4, h100, prefill=False, rows=8) == "fused"  # Marlin-style kernels
    assert weight_formats.kernel_for(int4, h100, prefill=True, rows=8) == "dequantize"
    assert weight_formats.kernel_for(weight_formats.FORMATS["bf16"], h100, prefill=False, rows=8) is None

    ask = dict(prompt_tokens=16, new_tokens=4, device="H100", engine="hf", weights="nf4", mode="cuda_graph")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = {b: predict_generation("gpt2", batch=b, **ask) for b in (1, 4)}
        fused = predict_generation("gpt2", batch=4, quant_kernel="fused", **ask)
        dequantized = predict_generation("gpt2", batch=4, quant_kernel="dequantize", **ask)
    assert auto[4].tpot_mean_ms == pytest.approx(dequantized.tpot_mean_ms) and fused.tpot_mean_ms < auto[4].tpot_mean_ms
    kernel = auto[4].assumptions["weight kernel"]
    assert "decode at batch 4: dequantize-then-GEMM" in kernel and "bitsandbytes" in kernel
    assert "decode at batch 1: fused dequant-GEMM" in auto[1].assumptions["weight kernel"]
    # the sweep's batch 1 is the fused gemv, its larger batches dequantize
    sweep, fused_sweep = ({p.batch: p.step_ms for p in r.batch_sweep} for r in (auto[4], fused))
    assert sweep[1] == pytest.approx(fused_sweep[1]) and sweep[2] > fused_sweep[2]


def test_quant_kernel_is_refused_where_nothing_is_dequantized():
    from perfpredict.llm.generation import predict_generation

    with pytest.raises(InvalidInputError, match="--quant-kernel fused applies to weight-only formats"):
        predict_generation("gpt2", prompt_tokens=16, new_tokens=4, device="H100", weights="bf16", quant_kernel="fused")
    with pytest.raises(
        InvalidInputError, match="--quant-kernel and --attn-implementation describe transformers' generate"
    ):
        predict_generation("llama-2-7b", device="H100", engine="vllm", weights="int4", quant_kernel="dequantize")


def test_a_repeated_generate_question_is_answered_from_the_cache(tmp_path, monkeypatch, capsys):

    from perfpredict.cli import main
    from perfpredict.llm import answer_cache, generation

    monkeypatch.delenv("PERFPREDICT_NO_GRAPH_CACHE", raising=False)
    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(tmp_path))
    calls = []
    real = generation._predict_hf
    monkeypatch.setattr(generation, "_predict_hf", lambda *a, **k: calls.append(k) or real(*a, **k))
    ask = dict(prompt_tokens=16, new_tokens=4, batch=2, device="H100", engine="hf", mode="cuda_graph")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = answer_cache.cached_generation("gpt2", **ask)
        again = answer_cache.cached_generation("gpt2", **ask)
        assert again == first and len(calls) == 1  # read, not re-predicted
        other = answer_cache.cached_generation("gpt2", **{**ask, "batch": 3})  # another question: answered
        assert len(calls) == 2 and other.batch == 3
        answer_cache.cached_generation("gpt2", use_cache=False, **ask)  # --no-cache answers again
        assert len(calls) == 3
        argv = ["generate", "--hf", "gpt2", "--device", "H100", "--prompt-tokens", "16", "--new-tokens", "4"]
        argv += ["--batch", "2", "--engine", "hf", "--mode", "cuda_graph", "--json", "-"]
        assert main(argv) == 0 and len(calls) == 3  # the CLI reads the same entry
    assert json.loads(capsys.readouterr().out)["tpot_mean_ms"] == pytest.approx(first.tpot_mean_ms)
    assert answer_cache.STORE.directory() == tmp_path / "answer-store" and len(answer_cache.STORE) == 2
    answer_cache.STORE.put_bytes(answer_cache.key("gpt2", **ask), b"damaged")
    assert answer_cache.cached_generation("gpt2", **ask) == first and len(calls) == 4  # answered and rewritten


def test_a_serving_engine_question_imports_neither_transformers_nor_torch_and_bert_is_still_refused(tmp_path):
    """Deciding "is this a decoder" through transformers' auto mappings imported transformers and torch (7-12 s of
    CPU in a fresh process) for an engine that reads the config's raw fields; a decoder the serving engines build is
    now known from its model_type, and anything else still asks transformers."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from perfpredict.cli import main; "
        f"rc = main(['generate', '--hf', 'llama-2-7b', '--device', 'H100', '--json', {str(tmp_path / 'r.json')!r}]); "
        "print(rc, sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    env = {**os.environ, "PERFPREDICT_CACHE_DIR": str(tmp_path)}
    env.pop("PERFPREDICT_NO_GRAPH_CACHE", None)
    for _ in ("a new question", "the same, from the answer cache"):
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert run.stdout.strip().splitlines()[-1] == "0 []", run.stdout + run.stderr
    assert json.loads((tmp_path / "r.json").read_text())["engine"] == "vllm"

    from perfpredict.llm.decode_trace import check_decoder

    with pytest.raises(InvalidInputError, match=r"bert-base-uncased \(bert\) is an encoder-only model"):
        check_decoder("bert-base")
    config = hf.load_config("bert-base")
    config.is_decoder = True  # BERT's causal-LM class as a decoder: generates
    check_decoder(config)


def test_the_answer_cache_key_is_the_same_in_every_process(shipped_ceilings):
    """A measured device carries a frozenset of measured keys, whose order follows the per-process hash seed."""
    import os
    import subprocess
    import sys

    code = "from perfpredict.llm.answer_cache import key; print(key('llama-2-7b', device='H100-SXM', batch=4))"
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(keys) == 1 and len(keys.pop()) == 32


def test_a_static_cache_step_costs_its_update_not_the_whole_cache():
    """generate() allocates the static cache once; a step writes one token's K and V into it (index_copy_), it
    neither re-creates nor copies the whole cache, so it moves less than the dynamic cache's torch.cat."""
    config = _layers("llama-2-7b", 2)
    graphs = {
        c: decode_graph(config, batch=4, context=200, dtype="bfloat16", cache=c, max_cache_len=256, replicate=False)
        for c in ("static", "dynamic")
    }
    static = graphs["static"]
    assert not [
        n for n in static.nodes if n.op == "creation" and n.outputs and n.outputs[0].numel >= 4 * 32 * 256 * 128
    ]
    updates = [n for n in static.nodes if n.target.startswith("index_copy")]
    assert updates and all(n.op == "copy" for n in updates)
    one_token = 4 * 32 * 1 * 128 * 2  # batch x kv heads x 1 token x head_dim x bf16
    assert all(n.bytes_written == one_token for n in updates)
    assert static.total_bytes < graphs["dynamic"].total_bytes and static.coverage == 1.0


def test_generate_host_times_the_steps_keys_the_cache_and_refuses_an_unknown_host(tmp_path, monkeypatch, capsys):
    """--host names the host CPU, as predict's does: a slower host's eager HF decode step takes longer (its
    dispatch and launches), the answer says which host, each host has its own cache entry, and a typo is one line."""
    from perfpredict.llm import answer_cache

    monkeypatch.delenv("PERFPREDICT_NO_GRAPH_CACHE", raising=False)
    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(tmp_path))
    argv = ["generate", "--hf", "gpt2", "--device", "H100", "--prompt-tokens", "16", "--new-tokens", "4"]
    argv += ["--engine", "hf", "--json", "-"]
    answers = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for host in ("h100-server", "dev-vm"):
            assert main([*argv, "--host", host]) == 0
            answers[host] = json.loads(capsys.readouterr().out)
    # the dev VM's 2 vCPUs dispatch each op slower than the GPU server's Xeon: an eager gpt2 step is host-bound
    assert answers["dev-vm"]["tpot_mean_ms"] > 1.2 * answers["h100-server"]["tpot_mean_ms"]
    assert answers["dev-vm"]["assumptions"]["host"].startswith("dev-vm")
    ask = dict(prompt_tokens=16, new_tokens=4, device="H100", engine="hf")
    keys = {h: answer_cache.key("gpt2", host=h, **ask) for h in ("h100-server", "dev-vm")}
    assert keys["h100-server"] != keys["dev-vm"] and all(k in answer_cache.STORE for k in keys.values())
    assert len(answer_cache.STORE) == 2
    assert main([*argv, "--host", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown host 'nope'" in err and "h100-server, dev-vm, calibrated" in err


def test_decode_alone_of_a_batch_that_does_not_fit_counts_only_the_sequences_that_fit():
    from perfpredict.llm.generation import predict_generation
    from perfpredict.llm.render_generation import summary_rows

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = predict_generation("gpt2", device="L4", engine="hf", batch=100_000, prompt_tokens=32, new_tokens=8)
    assert not r.fits and 0 < r.max_batch < 100_000 and r.running_batch == r.max_batch
    # max_batch sequences x 1000 / TPOT in ms: the cache never holds more at once (was 100,000 x 1000 / TPOT)
    assert r.decode_tokens_per_s == pytest.approx(r.max_batch * 1000 / r.tpot_mean_ms)
    detail = dict((m, d) for m, _, d in summary_rows(r))["Tokens/s"]
    assert f"at most {r.max_batch:,} sequences fit; the batch of 100,000 does not" in detail
