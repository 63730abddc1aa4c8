"""llm-foundry's published MPT throughput tables: the converter reads the README's tables as they are, the
committed CSV holds the 216 runs, and the MPT built for them has exactly the parameters each run reports."""

from __future__ import annotations

import pytest

from perfpredict.external import llm_foundry

SNIPPET = """# MPT Training Benchmarks

## H100 80GB BF16
|  Model | SeqLen (T) | # GPUs | GPU | MFU | HFU | Model TFLOP | MicroBatchSize | GradAccum | GlobalBatchSize | Throughput (S/s) | Throughput (T/s) | Throughput (T/s/GPU) | GlobalBatchSize (T) | Precision | MP Mode | Sharding Strategy | Activation Checkpointing | Activation CPUOffload | NumParams |
|  --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
|  7b | 2048 | 8 | h100_80gb | 46.44 | 46.44 | 459 | 6 | 1 | 48 | 41 | 85144 | 10643 | 98304 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 6658859008 |

## A100 40GB with 1600 Gbps node-node interconnect (RoCE)

|  Model | SeqLen (T) | # GPUs | GPU | MFU | HFU | Model TFLOP| MicroBatchSize | GradAccum | GlobalBatchSize | Throughput (S/s) | Throughput (T/s) | Throughput (T/s/GPU) | GlobalBatchSize (T) | Precision | MP Mode | Sharding Strategy | Activation Checkpointing | Activation CPUOffload | NumParams |
|  --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
|  70b | 2048 | 128 | a100_40gb | 48.91 | 65.21 | 152 | 4 | 1 | 512 | 23 | 48194 | 376 | 1048576 | bf16 | PURE | FULL_SHARD | True | False | 64862437376 |
"""


def test_the_converter_reads_every_table_under_its_heading():
    first, second = llm_foundry.rows_of(SNIPPET)
    assert (first["model"], first["device"], first["tokens_per_s_per_gpu"], first["activation_checkpointing"]) == (
        "7b",
        "H100-SXM",
        10643,
        "False",
    )
    assert first["source_line"] == 6 and first["inter_node_gbit_per_s"] == ""  # the H100 heading states none
    assert second["section"].startswith("A100 40GB") and second["inter_node_gbit_per_s"] == "200"  # 1600 / 8 GPUs
    assert (second["mp_mode"], second["num_params"], second["gpus"]) == ("PURE", 64862437376, 128)


@pytest.fixture(scope="module")
def runs():
    return llm_foundry.read()


def test_the_committed_table_holds_the_216_runs(runs):
    assert len(runs) == 216
    per_section = {}
    for r in runs:
        per_section[r["section"]] = per_section.get(r["section"], 0) + 1
    assert sorted(per_section.values()) == [7, 18, 52, 61, 78]
    # every run's global batch is micro-batch x accumulation x GPUs, and its tokens that x the sequence
    assert all(r["micro_batch"] * r["grad_accum"] * r["gpus"] == r["global_batch"] for r in runs)
    assert all(r["global_batch"] * r["seq_len"] == r["global_batch_tokens"] for r in runs)
    assert {r["device"] for r in runs} == {"H100-SXM", "A100-80GB", "A100-40GB"}


def test_the_mpt_built_for_them_has_each_runs_parameters(runs):
    pytest.importorskip("transformers")
    from perfpredict.external import llm_foundry_models as mpt

    # learned position embeddings and biases: 70B at 2,048 tokens = 80 x (12 x 8192^2 + 13 x 8192)
    # + (50,368 + 2,048) x 8192 + 2 x 8192 = 64,862,437,376, as the tables say
    assert mpt.param_count(mpt.config("70b", 2048)) == 80 * (12 * 8192**2 + 13 * 8192) + 52416 * 8192 + 2 * 8192
    published = {(r["model"], r["seq_len"]): r["num_params"] for r in runs}  # 49 sizes and lengths
    built = {(size, seq): mpt.param_count(mpt.config(size, seq)) for size, seq in published}
    assert built == published


def test_the_benchmark_asks_the_fp8_rows_with_transformer_engines_delayed_scaling(runs):
    """llm-foundry's amp_fp8 runs used Transformer Engine's linears (data/external/llm_foundry/README.md), which is
    float8='delayed' here, not torchao's tensorwise; the bf16 rows ask for no float8."""
    from benchmarks import external_llm_foundry as bench
    from perfpredict.hardware.precision import FLOAT8_RECIPES

    assert "`amp_fp8` (Transformer Engine linears)" in (llm_foundry.OUT_DIR / "README.md").read_text()
    fp8 = [r for r in runs if r["precision"] == "amp_fp8"]
    assert len(fp8) == 7 and {r["device"] for r in fp8} == {"H100-SXM"}
    for row in runs:
        fields, marks = bench.request_fields(row)
        assert marks == []  # every feature the rows need is in this checkout
        assert fields.get("float8") == ("delayed" if row in fp8 else None), row["source_line"]
        assert fields.get("activation_checkpointing") == ("full" if row["activation_checkpointing"] else None)
    assert FLOAT8_RECIPES["delayed"].startswith("Transformer Engine")
