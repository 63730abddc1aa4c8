"""Vidur's CPU-overhead profiles: the 70B-and-larger rows dropped on their name alone, the rest converted, and the
host phases fitted on them reproducible from the committed rows."""

from __future__ import annotations

import pytest

from perfpredict.external import vidur_cpu
from perfpredict.external.source_tree import SourceTree

HEAD = ",schedule_mean," + ",".join(
    f"{p}_mean" for p in ("sampler_launch", "sampler_e2e", "prepare_inputs_launch", "prepare_inputs_e2e",
                          "model_execution_launch", "model_execution_e2e", "process_model_outputs")
) + ",schedule_median," + ",".join(
    f"{p}_median" for p in ("sampler_launch", "sampler_e2e", "prepare_inputs_launch", "prepare_inputs_e2e",
                            "model_execution_launch", "model_execution_e2e", "process_model_outputs")
) + ",model_name,batch_size,tensor_parallel_degree,ray_comm_time_mean"  # fmt: skip


def _line(i: int, model: str, value: str, batch: int = 8, tp: int = 1) -> str:
    return ",".join([str(i), *[value] * 16, model, str(batch), str(tp), value])


def test_held_out_rows_are_dropped_on_their_name_before_any_value_is_read(tmp_path):
    # the held-out rows carry values that would not even parse: dropping them must not touch them
    text = "\n".join([HEAD, _line(0, "meta-llama/Llama-2-7b-hf", "0.5", 16), _line(1, "meta-llama/Llama-2-70b-hf", "x"),
                      _line(2, "Qwen/Qwen-72B", "y"), _line(3, "some/unlisted-13b", "z")]) + "\n"  # fmt: skip
    rows = list(vidur_cpu.rows_of(text, "a100"))
    assert [(r["model"], r["batch_size"], r["device"]) for r in rows] == [("meta-llama/Llama-2-7b-hf", 16, "A100-80GB")]
    assert rows[0]["schedule_median_ms"] == 0.5 and rows[0]["ray_comm_mean_ms"] == 0.5
    assert not vidur_cpu.allowed("meta-llama/Llama-2-70b-hf") and not vidur_cpu.allowed("Qwen/Qwen-72B")
    with pytest.raises(ValueError):  # the same row of an allowed model would have been parsed
        list(vidur_cpu.rows_of("\n".join([HEAD, _line(0, "microsoft/phi-2", "bad")]), "a40"))


def test_a_checkout_cannot_be_read_at_an_older_commit(tmp_path):
    from perfpredict.core.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="needs its git directory"):
        SourceTree.open(tmp_path, rev=vidur_cpu.COMMIT)


def test_the_committed_rows_hold_no_held_out_model_and_refit_to_the_saved_phases():
    from perfpredict.external.vidur import held_out
    from perfpredict.llm.host_cost_fit import fit_vidur
    from perfpredict.llm.host_costs import figures

    rows = vidur_cpu.read()
    assert rows and not any(held_out(r["model"]) for r in rows)
    assert {r["device"] for r in rows} == {"A100-80GB", "A40"}
    fitted = fit_vidur(rows)  # what benchmarks/engine_host_costs.py saved as vLLM 0.4-0.5's phases
    saved = figures("vllm-0.5")["phases"]
    for phase, terms in fitted.items():
        for term, value in terms.items():
            assert saved[phase][term] == pytest.approx(value, rel=1e-9, abs=1e-12)
    # the per-sequence parts sum to tens of microseconds (V0's Python per running sequence and step)
    assert 30e-6 < sum(t["per_seq_s"] for t in fitted.values()) < 150e-6
