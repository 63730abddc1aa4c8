"""The "does not fit" advice (issue 45, section 5): only remedies the command in hand can take, each with about what
the peak would be after it, and the multi-GPU warning printed once."""

from __future__ import annotations

import pytest

from perfpredict.core.memory_advice import Levers, memory_warning, remedies
from perfpredict.core.units import GIB

H100_GIB = 80  # a round device: the target is 90% of it, 72 GiB
LLAMA_70B_FP16 = {"weights": 128 * GIB, "activations": 0.5 * GIB}  # ~64 G parameters x 2 bytes, batch 1


def _by_flag(found) -> dict[str, float]:
    return {r.flag: r.after_bytes / GIB for r in found}


def test_fp16_inference_is_offered_tp_with_its_size_per_gpu_and_no_same_size_precision():
    peak = 129 * GIB  # 128 + 0.5 + 0.5 runtime
    text = memory_warning(
        peak, H100_GIB * GIB, "inference", LLAMA_70B_FP16, levers=Levers(dtype="float16", multi_gpu=True)
    )
    assert "does not fit" in text
    # --tp 2 halves the weights: 129 - 128 + 64 = 65 GiB, under 72
    assert "--tp 2 (splits the weights, 128.00 GiB on each GPU now, over 2 GPUs): about 65.0 GiB per GPU" in text
    for never in ("bfloat16", "lower precision", "4-bit", "--batch", "checkpointing"):
        assert never not in text  # same size, no flag for it, or nothing to gain at batch 1


def test_float32_inference_is_offered_a_16_bit_dtype_and_a_smaller_batch():
    terms = {"weights": 60 * GIB, "activations": 16 * GIB}
    levers = Levers(batch=8, dtype="float32", half_dtype="float16", multi_gpu=True)
    found = _by_flag(remedies("inference", terms, 77 * GIB, 72 * GIB, "", levers))
    # batch: 2 GiB per sample, 61 GiB fixed: (72 - 61) // 2 = 5 samples, 61 + 10 = 71 GiB
    assert found["--batch 5"] == pytest.approx(71.0)
    # float16 halves weights and activations: 77 - (60 + 16) / 2 = 39 GiB
    assert found["--dtype float16"] == pytest.approx(39.0)
    # tp 2 splits the 60 GiB of weights: 77 - 30 = 47 GiB
    assert found["--tp 2"] == pytest.approx(47.0)


def test_training_offers_its_flags_only():
    terms = {"weights": 14 * GIB, "gradients": 14 * GIB, "optimizer state": 28 * GIB, "activations": 20 * GIB}
    levers = Levers(batch=4, dtype="bfloat16", multi_gpu=True)
    text = memory_warning(77 * GIB, H100_GIB * GIB, "training", terms, optimizer="adamw", levers=levers)
    found = _by_flag(remedies("training", terms, 77 * GIB, 72 * GIB, "adamw", levers))
    assert found["--optimizer adamw-8bit"] == pytest.approx(77 - 21)  # 3/4 of 28
    # FSDP over 2 GPUs halves 14 + 14 + 28 = 56 GiB: 77 - 28 = 49, already under 72
    assert found["--fsdp --dp 2"] == pytest.approx(49.0)
    assert found["--tp 2"] == pytest.approx(49.0)  # the same 56 GiB split by tensor parallelism
    # batch: 5 GiB per sample, 57 GiB fixed: (72 - 57) // 5 = 3
    assert found["--batch 3"] == pytest.approx(72.0)
    assert "checkpointing" not in text and "--dtype" not in text  # no flag for it; training's dtype is --precision


def test_a_sharded_plan_is_offered_more_gpus_and_a_larger_tp():
    # FSDP over 8 GPUs, tp 2: each GPU holds 1/8 of 96 GiB of state (12) and 64 GiB of activations
    terms = {"weights": 2 * GIB, "gradients": 2 * GIB, "optimizer state": 8 * GIB, "activations": 64 * GIB}
    levers = Levers(batch=1, dtype="bfloat16", tp=2, dp=8, shard_stage=3, multi_gpu=True)
    found = _by_flag(remedies("training", terms, 77 * GIB, 72 * GIB, "adamw", levers))
    assert found["--dp 16"] == pytest.approx(77 - 6)  # 12 GiB halves
    assert found["--tp 4"] == pytest.approx(77 - 6)  # the 12 GiB held now, split over twice the ranks
    assert not any(flag.startswith("--fsdp") for flag in found)


def test_zero_1_over_4_gpus_is_offered_stage_3_on_them():
    # ZeRO-1 over 4 GPUs: weights 8 and gradients 8 whole, the optimizer state 32 / 4 = 8 GiB per GPU
    terms = {"weights": 8 * GIB, "gradients": 8 * GIB, "optimizer state": 8 * GIB, "activations": 50 * GIB}
    levers = Levers(batch=1, dtype="bfloat16", dp=4, shard_stage=1, zero=True, multi_gpu=True)
    found = _by_flag(remedies("training", terms, 76 * GIB, 72 * GIB, "sgd", levers))
    assert found["--zero-stage 3"] == pytest.approx(76 - 24 + (8 + 8 + 32) / 4)  # 64 GiB


def test_nothing_the_command_takes_says_so():
    # a CPU at batch 1 in bfloat16: no smaller batch, dtype or more GPUs
    text = memory_warning(90 * GIB, H100_GIB * GIB, "inference", LLAMA_70B_FP16, levers=Levers(dtype="bfloat16"))
    assert text.endswith("no flag of this command brings it under 72.00 GiB: use a device with more memory")


def test_a_remedy_that_does_not_reach_the_target_says_so():
    # tp 8 at most within a node: 400 GiB of weights / 8 = 50, plus the 30 GiB of activations = 80.5 GiB > 72
    terms = {"weights": 400 * GIB, "activations": 30 * GIB}
    text = memory_warning(430.5 * GIB, H100_GIB * GIB, "inference", terms, levers=Levers(multi_gpu=True))
    assert "--tp 8 (splits the weights, 400.00 GiB on each GPU now, over 8 GPUs): about 80.5 GiB per GPU, not " in text
