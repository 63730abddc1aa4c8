"""LLM-Inference-Bench's results as converted: columns with units, the catalog device of each NVIDIA GPU, and the
shipped table's rows."""

from __future__ import annotations

from collections import Counter

import pytest

from perfpredict.external import llm_inference_bench as lib

# four rows of the source's Plots/All_results.csv, as published (the header is theirs)
SOURCE = """Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput
Nvidia H100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,1024,1,7.838957834243774,261.2593015024683
Nvidia A100 GPU,4,vLLM,meta-llama/Llama-2-70b-hf,128,1,4.284839630126953,59.74556186802011
Nvidia GH200 GPU,1,TensorRT-LLM,mistralai/Mistral-7B-v0.1,128,16,0.8496496915817261,4820.8103181615925
AMD MI300X GPU,8,vLLM,meta-llama/Llama-2-70b-hf,2048,64,60.1,4361.7
"""


def test_rows_carry_units_the_catalog_device_and_their_source_line(tmp_path):
    rows = lib.rows_of(SOURCE)
    first = rows[0]
    assert first["latency_s"] == pytest.approx(7.838957834243774) and first["input_tokens"] == first["output_tokens"]
    assert first["device"] == "H100-SXM" and first["gpus"] == 1 and first["source_line"] == 2
    assert [r["device"] for r in rows] == ["H100-SXM", "A100-40GB", "GH200", ""]  # the catalog has a GH200 now
    # throughput is (input + output) x batch / latency, as the source computes it
    assert first["throughput_tokens_per_s"] == pytest.approx(2 * 1024 * 1 / first["latency_s"])
    path = lib.write(rows, "abc123", tmp_path)
    assert lib.read(path) == rows


def test_the_shipped_table_holds_the_vllm_rows_the_benchmark_scores():
    rows = lib.read()
    assert len(rows) == 4772
    vllm = Counter((r["model"], r["device"], r["gpus"]) for r in rows if r["framework"] == "vLLM" and r["device"])
    assert vllm[("meta-llama/Llama-2-7b-hf", "H100-SXM", 1)] == 21  # one configuration measured twice
    assert vllm[("meta-llama/Llama-2-70b-hf", "H100-SXM", 4)] == 20
    assert vllm[("mistralai/Mixtral-8x7B-v0.1", "A100-40GB", 4)] == 27
    assert {r["input_tokens"] for r in rows if r["framework"] == "vLLM"} == {128, 256, 512, 1024, 2048}


def test_the_power_table_is_converted_to_watts_per_gpu_its_blank_lines_dropped():
    text = (
        "Hardware,Num of Hardware,Framework,Model,Input Output Length,Batch Size,Latency,Throughput,avg_power\n"
        ",,,,,,,,\n"
        "Nvidia A100 GPU,1,vLLM,meta-llama/Llama-2-7b-hf,1024,1,13.97,146.5,222122.27\n"
    )
    (row,) = lib.power_rows(text)
    assert row["power_w"] == pytest.approx(222.12227) and row["device"] == "A100-40GB" and row["source_line"] == 3
    shipped = lib.read_power()
    assert len(shipped) == 48 and {r["framework"] for r in shipped} == {"vLLM", "TensorRT-LLM", "Deepspeed-MII"}
    assert all(50 < r["power_w"] < 1000 for r in shipped)


def test_a_row_faster_than_streaming_its_weights_is_refused_and_identical_prompts_reach_fewer_experts():
    from benchmarks.serving_fit import _impossible

    # Qwen2-7B (15.2 GB of fp16 weights), 2,048 new tokens on one H100 (3.35 TB/s): at least 2048 x 15.2e9 / 3.35e12
    # = 9.3 s; the source's 0.08 s is not a run of this configuration
    row = {"model": "Qwen/Qwen2-7B", "device": "H100-SXM", "tp": 1, "tokens": 2048, "batch": 1, "measured_s": 0.0826}
    assert "under the weight-streaming bound" in _impossible(row)["error"]
    assert "error" not in _impossible({**row, "measured_s": 20.0})
    # Mixtral at batch 16 on 4 x A100-40GB: uniform routing reaches nearly every expert (a bound above the measured
    # 1.41 s), one prompt repeated only its two
    mixtral = {"model": "mistralai/Mixtral-8x7B-v0.1", "device": "A100-40GB", "tp": 4, "tokens": 128, "batch": 16,
               "measured_s": 1.41}  # fmt: skip
    assert "error" in _impossible(mixtral) and "error" not in _impossible(mixtral, identical=True)
