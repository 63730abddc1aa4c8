"""Generation rows: the timing arithmetic (on a stub whose generate takes a known time per token), the GPU path's
memory calls (mocked), resume and the budget, and a real tiny decoder on the CPU through transformers' generate."""

from __future__ import annotations

import dataclasses
import json
import time
from types import SimpleNamespace

import pytest
import torch

from perfpredict.core.errors import InvalidInputError
from perfpredict.profiling import generation_timing as gt


class StubLM:
    """A stand-in for a causal LM: ``generate`` sleeps ``prefill_s + per_token_s * new`` and returns that many
    tokens (or ``short`` fewer), on whatever device its inputs live."""

    def __init__(self, prefill_s: float, per_token_s: float, short: int = 0) -> None:
        self.config = SimpleNamespace(vocab_size=100)
        self.prefill_s, self.per_token_s, self.short = prefill_s, per_token_s, short
        self.calls: list[dict] = []

    def parameters(self):
        return [torch.zeros(10)]

    def generate(self, input_ids, attention_mask, max_new_tokens, min_new_tokens, **kwargs):
        self.calls.append({"new": max_new_tokens, **kwargs})
        time.sleep(self.prefill_s + self.per_token_s * max_new_tokens)
        b, p = input_ids.shape
        return torch.empty(b, p + max_new_tokens - self.short, dtype=torch.long, device=input_ids.device)


def test_ttft_and_decode_step_come_from_the_two_lengths():
    spec = gt.GenSpec("Qwen/Qwen2-0.5B", mode="eager", batch=4, prompt_tokens=8, new_tokens=11)
    lm = StubLM(prefill_s=0.03, per_token_s=0.01)
    got = gt.time_generation(lm, spec, "cpu", reps=2, ttft_reps=3)
    # ttft = prefill + 1 token = 40 ms; e2e = 30 + 11 x 10 = 140 ms; a decode step = (140 - 40) / 10 = 10 ms
    assert got["ttft_ms"] == pytest.approx(40, abs=15)
    assert got["e2e_ms"] == pytest.approx(140, abs=25)
    assert got["decode_ms_per_token"] == pytest.approx(10, abs=3)
    assert got["tokens_per_s"] == pytest.approx(4 * 11 / (got["e2e_ms"] / 1e3))
    assert len(got["ttft_ms_reps"]) == 3 and len(got["e2e_ms_reps"]) == 2
    # warm-up (11), one single token, 3 timed single tokens, 2 timed full runs; eager never compiles
    assert [c["new"] for c in lm.calls] == [11, 1, 1, 1, 1, 11, 11]
    assert all(c["disable_compile"] and c["cache_implementation"] == "static" for c in lm.calls)
    assert got["peak_memory_bytes"] is None


def test_the_gpu_path_reads_the_allocator_peak(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("sync", device)))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append(("reset", device)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 123456)
    spec = gt.GenSpec("Qwen/Qwen2-0.5B", mode="compiled", batch=1, prompt_tokens=4, new_tokens=3)
    lm = StubLM(0.0, 0.001)
    got = gt.time_generation(lm, spec, "meta")  # any non-CPU device takes the GPU path; meta holds no memory
    assert got["peak_memory_bytes"] == 123456
    assert ("reset", "meta") in calls and calls.count(("sync", "meta")) >= 2 * len(lm.calls)
    assert all("compile_config" in c and "disable_compile" not in c for c in lm.calls)
    assert gt.perfpredict_mode(spec, "inductor") == "compiled_cuda_graph"  # reduce-overhead: CUDA graphs
    assert gt.perfpredict_mode(spec, "eager") == "compiled"


def test_a_short_output_is_an_error_row_not_a_timing(tmp_path, monkeypatch):
    spec = gt.GenSpec("Qwen/Qwen2-0.5B", batch=1, prompt_tokens=4, new_tokens=5)
    monkeypatch.setattr(gt, "build_model", lambda spec, device: StubLM(0.0, 0.0, short=1))
    summary = gt.collect_generation(tmp_path, [spec], "cpu", "cpu-test")
    (row,) = [json.loads(x) for x in (tmp_path / gt.ROWS_JSONL).read_text().splitlines()]
    assert summary.errors == 1 and row["status"] == "error" and "new tokens, not 5" in row["error"]
    assert "ttft_ms" not in row  # no timing columns were invented


def test_rows_resume_and_the_budget_skips_what_no_longer_fits(tmp_path, monkeypatch):
    monkeypatch.setattr(gt, "build_model", lambda spec, device: StubLM(0.0, 0.0))
    now = [0.0]

    def fake_time(lm, spec, device, **kw):
        now[0] += 10.0 * spec.batch  # each row "takes" 10 s per sequence on the fake clock
        return {"ttft_ms": 1.0, "decode_ms_per_token": 1.0, "tokens_per_s": 1.0, "first_call_ms": 1.0}

    monkeypatch.setattr(gt, "time_generation", fake_time)
    specs = [gt.GenSpec("Qwen/Qwen2-0.5B", batch=b, prompt_tokens=4, new_tokens=3) for b in (1, 4, 2)]
    compiled = gt.GenSpec("Qwen/Qwen2-0.5B", mode="compiled", batch=1, prompt_tokens=4, new_tokens=3)
    summary = gt.collect_generation(
        tmp_path, [*specs, compiled], "cpu", "cpu-test", budget_s=45.0, clock=lambda: now[0]
    )
    # batch 1 takes 10 s; batch 4 is expected to take 10 x sqrt(4) = 20 s and does (40 s in, 50 s spent):
    # batch 2 no longer fits (5 s left) and the compiled row needs its compile guess: both left for later
    assert summary.measured == 2 and summary.stopped_by == "budget"
    assert summary.skipped_budget == [specs[2].to_key(), compiled.to_key()]
    again = gt.collect_generation(tmp_path, specs, "cpu", "cpu-test", budget_s=1000.0, clock=lambda: now[0])
    assert again.skipped_existing == 2 and again.measured == 1


def test_spec_checks_and_keys():
    with pytest.raises(InvalidInputError, match="mode"):
        gt.GenSpec("Qwen/Qwen2-0.5B", mode="vllm")
    with pytest.raises(InvalidInputError, match="new_tokens >= 2"):
        gt.GenSpec("Qwen/Qwen2-0.5B", new_tokens=1)
    a = gt.GenSpec("meta-llama/Llama-2-7b-hf", (("num_hidden_layers", 8),), batch=8)
    assert json.loads(a.to_key())["overrides"] == {"num_hidden_layers": 8}
    assert a.to_key() != dataclasses.replace(a, batch=1).to_key()
    plan = gt.lease_plan()
    assert [s.mode for s in plan].index("compiled") > 0 and plan[0].model == "Qwen/Qwen2-0.5B"


def test_the_lease_models_are_1_to_3b_class_decoders():
    qwen, llama8 = (s for s in {s.model_key: s for s in gt.lease_plan()}.values())
    sizes = {}
    for spec in (qwen, llama8):
        model = gt.build_model(spec, "meta")
        sizes[spec.model] = sum(p.numel() for p in model.parameters())
    # Qwen2-0.5B as shipped: 494M with tied embeddings; Llama-2-7B at 8 of 32 layers:
    # 8 x 202.4M + 2 x 32000 x 4096 (embedding and head) + norms = 1.88B
    assert 0.45e9 < sizes["Qwen/Qwen2-0.5B"] < 0.55e9
    assert 1.8e9 < sizes["meta-llama/Llama-2-7b-hf"] < 2.0e9
    fields = gt.model_config(llama8)
    assert fields["num_hidden_layers"] == 8 and fields["hidden_size"] == 4096


def test_a_tiny_decoder_generates_on_the_cpu(tmp_path):
    spec = gt.dry_run_plan()[0]
    summary = gt.collect_generation(tmp_path, [spec], "cpu", "cpu-test", reps=1, ttft_reps=1)
    (row,) = [json.loads(x) for x in (tmp_path / gt.ROWS_JSONL).read_text().splitlines()]
    assert summary.measured == 1 and row["status"] == "ok", row.get("error")
    assert row["schema_version"] == gt.GEN_SCHEMA_VERSION and row["row_kind"] == "generation"
    assert row["perfpredict_mode"] == "eager" and row["attn_implementation"] == "sdpa"
    assert 0 < row["ttft_ms"] <= row["e2e_ms"] and row["decode_ms_per_token"] >= 0
    assert json.loads(row["config_json"])["num_hidden_layers"] == 2 and row["param_count"] > 0
    assert row["env_transformers_version"]


@pytest.mark.slow
def test_the_compiled_mode_compiles_through_transformers(tmp_path):
    from torch._dynamo.utils import counters

    counters.clear()
    spec = dataclasses.replace(gt.dry_run_plan()[0], mode="compiled")
    gt.collect_generation(tmp_path, [spec], "cpu", "cpu-test", reps=1, ttft_reps=1, compile_backend="eager")
    (row,) = [json.loads(x) for x in (tmp_path / gt.ROWS_JSONL).read_text().splitlines()]
    assert row["status"] == "ok", row.get("error")
    assert json.loads(row["compile_config"])["backend"] == "eager" and row["perfpredict_mode"] == "compiled"
    assert counters["stats"]["unique_graphs"] >= 1  # the decode step went through dynamo
