"""The engines' host time per step: where each phase runs, what a step costs by hand, the frontend, the versions."""

from __future__ import annotations

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.llm.engine_versions import VERSIONS, get_version
from perfpredict.llm.host_costs import HostChoices, HostCost, HostPhase, figures, host_cost


def test_a_step_adds_serial_work_hides_work_beside_the_gpu_and_pipelines_another_process():
    cost = HostCost(
        (
            HostPhase("schedule", "serial", step_s=1e-3, per_seq_s=10e-6),
            HostPhase("outputs", "beside_gpu", per_seq_s=50e-6),
            HostPhase("stream", "other_process", per_output_token_s=100e-6),
        )
    )
    step = cost.step(seqs=100, output_tokens=100)
    assert step.serial_s == pytest.approx(1e-3 + 100 * 10e-6)  # 2 ms
    assert step.beside_gpu_s == pytest.approx(100 * 50e-6)  # 5 ms
    assert step.other_process_s == pytest.approx(100 * 100e-6)  # 10 ms
    # wall = max(serial + max(gpu, beside), other): a 4 ms GPU step waits for the 5 ms of outputs, then the
    # 10 ms frontend paces the pipeline; a 20 ms GPU step hides both
    assert step.wall_s(4e-3) == pytest.approx(max(2e-3 + 5e-3, 10e-3))  # 10 ms
    assert step.wall_s(20e-3) == pytest.approx(2e-3 + 20e-3)  # 22 ms
    assert step.exposed_s(20e-3) == pytest.approx(2e-3)
    assert cost.serial().step(100, output_tokens=100).wall_s(4e-3) == pytest.approx(2e-3 + 5e-3 + 10e-3 + 4e-3)
    with pytest.raises(InvalidInputError, match="where 'nowhere' is not one of"):
        HostPhase("x", "nowhere")


def _sum(version: str, where: str, terms=("step_s", "per_seq_s")) -> tuple[float, ...]:
    phases = figures(f"vllm-{version}")["phases"].values()
    return tuple(sum(p.get(t, 0.0) for p in phases if p["where"] == where) for t in terms)


@pytest.mark.parametrize("version", [v.version for v in VERSIONS if v.engine == "vllm"])
def test_each_vllm_version_pays_its_saved_phases_where_its_design_runs_them(version):
    v = get_version("vllm", version)
    step = host_cost(v).step(seqs=64, prefill_tokens=0, output_tokens=64, workers=1)
    for where, got in (("serial", step.serial_s), ("beside_gpu", step.beside_gpu_s), ("other_process",
                                                                                     step.other_process_s)):  # fmt: skip
        fixed, per_seq = _sum(version, where)
        assert got == pytest.approx(fixed + 64 * per_seq, abs=1e-12)  # 64 sequences, no prefill, one GPU
    places = {p.name: p.where for p in host_cost(v).phases}
    expected = {
        "0.5": "serial",  # V0 before 0.6: output processing in turn with the GPU
        "0.6": "beside_gpu",  # asynchronous output processing
        "0.8": "other_process",  # V1: detokenization in the frontend's process
        "0.10": "other_process",
    }
    assert places["process_outputs"] == expected[version]
    assert places["schedule"] == "serial"


def test_vllm_0_6_options_move_its_phases_async_output_off_and_multi_step_scheduling():
    v = get_version("vllm", "0.6")
    base = host_cost(v).step(64, 0, 64)
    off = host_cost(v, HostChoices(async_output=False)).step(64, 0, 64)
    assert off.beside_gpu_s == 0 and off.serial_s == pytest.approx(base.serial_s + base.beside_gpu_s)
    multi = host_cost(v, HostChoices(scheduler_steps=8)).step(64, 0, 64)
    phases = {p.name: p for p in host_cost(v).phases}
    sched = sum(phases[n].seconds(64, 0, 64, 0, 1) for n in ("schedule", "prepare_inputs"))
    assert multi.serial_s == pytest.approx(base.serial_s - sched + sched / 8)  # scheduled once per 8 steps
    v1 = host_cost(get_version("vllm", "0.10"), HostChoices(async_scheduling=True)).step(64, 0, 64)
    assert v1.serial_s < host_cost(get_version("vllm", "0.10")).step(64, 0, 64).serial_s  # prepared during the step


def test_sglang_overlaps_its_scheduler_and_the_fitted_engines_pay_one_serial_phase():
    sglang = {p.name: p.where for p in host_cost(get_version("sglang")).phases}
    assert sglang["schedule"] == sglang["prepare_inputs"] == "beside_gpu"  # the overlap scheduler
    assert sglang["process_outputs"] == "other_process"  # its detokenizer process
    for engine in ("trtllm", "mii", "llamacpp"):
        v = get_version(engine)
        (phase,) = host_cost(v).phases
        saved = figures(v.key)["phases"]["engine"]
        # 16 sequences, 100 prefill tokens, 2 GPUs: step + 16 per-seq + 100 per-token + the multi-GPU part + the one
        # worker beyond the driver
        want = (saved["step_s"] + 16 * saved["per_seq_s"] + 100 * saved["per_prefill_token_s"] + saved["tp_step_s"]
                + saved.get("per_worker_s", 0.0))  # fmt: skip
        assert phase.where == "serial" and host_cost(v).step(16, 100, 16, workers=2).serial_s == pytest.approx(want)
        assert "fitted_serial" in figures(v.key)


def test_the_openai_server_streams_every_token_in_the_engines_process_or_its_own():
    api = figures("frontend-openai-server")["phases"]
    per_token, per_request = api["api_stream"]["per_output_token_s"], api["api_requests"]["per_new_request_s"]
    v05, v10 = get_version("vllm", "0.5"), get_version("vllm", "0.10")
    offline = host_cost(v05).step(64, 0, 64)
    served = host_cost(v05, HostChoices(frontend="openai-server")).step(64, 0, 64, new_requests=2)
    # vLLM 0.5 runs the server's coroutines in the engine's process: 64 streamed tokens and 2 requests add in turn
    assert served.serial_s == pytest.approx(offline.serial_s + 64 * per_token + 2 * per_request)
    v1 = host_cost(v10, HostChoices(frontend="openai-server")).step(64, 0, 64)
    v1_offline = host_cost(v10).step(64, 0, 64)
    assert v1.serial_s == pytest.approx(v1_offline.serial_s)  # V1's frontend is another process
    assert v1.other_process_s == pytest.approx(v1_offline.other_process_s + 64 * per_token)
    moved = host_cost(v10, HostChoices(frontend="openai-server", frontend_process="engine")).step(64, 0, 64)
    assert moved.serial_s == pytest.approx(v1_offline.serial_s + 64 * per_token)
    assert 20e-6 < per_token < 500e-6  # tens of microseconds per token and request, from v0.5.3's profile
    with pytest.raises(InvalidInputError, match="frontend 'grpc' is not one of offline, openai-server"):
        host_cost(v10, HostChoices(frontend="grpc"))


@pytest.fixture(scope="module")
def served_8b():
    from perfpredict.llm.generation_options import EngineOptions
    from perfpredict.llm.vllm_engine import setup

    opts = EngineOptions(engine="vllm", version="0.5", frontend="openai-server")
    return setup("llama-3-8b", device="H100-SXM", options=opts)


def test_an_api_server_in_the_engines_process_adds_its_host_cost_per_running_request(served_8b):
    # the symptom: at batch 64-256 a host-bound server's time per token grows per running request by its
    # host cost per request, not only the GPU's ~0.03-0.09 ms
    s = served_8b
    step = {b: s.costs.decode_s(b, b * 300, 300) + s.host_cost.step(b, 0, b).exposed_s(0) for b in (64, 256)}
    gpu = {b: s.costs.decode_s(b, b * 300, 300) for b in (64, 256)}
    per_request = sum(p.per_seq_s + p.per_output_token_s for p in s.host_cost.phases)  # all serial in vLLM 0.5
    slope = (step[256] - step[64]) / 192
    assert slope == pytest.approx((gpu[256] - gpu[64]) / 192 + per_request)
    # 79 us of the engine's phases (Vidur's) + 100 us per streamed token (the server) = 0.18 ms per request, about
    # ten times the GPU's own growth at a 300-token context (0.02 ms)
    assert 1.5e-4 < per_request < 2.5e-4 and slope > 5 * (gpu[256] - gpu[64]) / 192


def test_versions_resolve_aliases_default_to_the_current_one_and_refuse_the_unknown_with_choices():
    assert get_version("vllm").version == "0.10" and get_version("vllm", "v1").version == "0.10"
    assert get_version("vllm", "0.4").version == "0.5" and get_version("vllm", "v0").version == "0.6"
    with pytest.raises(InvalidInputError, match=r"vLLM version '0.3' is not modelled; choose one of 0.5, 0.6"):
        get_version("vllm", "0.3")
    with pytest.raises(InvalidInputError, match="has no versions"):
        get_version("hf")


def test_the_fitted_cost_per_gpu_worker_reaches_the_phases_and_pipelines_share_the_driver():
    """The serial host time fitted on LLM-Inference-Bench has a part per GPU worker beyond the driver (each step's
    inputs broadcast to each); split over vLLM 0.6's serial phases, it sums back: 8 workers cost 4 workers' worth
    more than 4 (the fixed tensor-parallel part is the same for both)."""
    from perfpredict.llm.host_costs import HostStep

    v = get_version("vllm", "0.6")
    per_worker = figures(v.key)["fitted_serial"]["host_per_worker_s"]
    four, eight = (host_cost(v).step(16, 0, 16, workers=w).serial_s for w in (4, 8))
    assert per_worker > 0 and eight - four == pytest.approx(4 * per_worker)
    # two virtual engines share the driver: a step of 14 ms of GPU and 20 ms of serial host time lasts
    # max(14 + 20, 2 x 20) = 40 ms; 5 ms of it beside the GPU counts on the driver too: max(20 + 14, 2 x 25) = 50
    assert HostStep(serial_s=0.020).wall_s(0.014, pp=2) == pytest.approx(0.040)
    assert HostStep(serial_s=0.020, beside_gpu_s=0.005).wall_s(0.014, pp=2) == pytest.approx(0.050)
