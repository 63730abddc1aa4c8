"""Serving over several GPUs: the host cost of driving N workers, pipeline stages (vLLM's virtual engines) and
expert parallelism, each against hand arithmetic."""

from __future__ import annotations

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.llm.decoder_spec import spec_from
from perfpredict.llm.engine_graph import Numerics, StepShape, rank_shape, step_graph, weight_elements
from perfpredict.llm.generation_options import EngineOptions
from perfpredict.llm.host_costs import HostCost, serial_host
from perfpredict.llm.paged_kv import KvPlan
from perfpredict.llm.scheduler import Scheduler
from perfpredict.llm.vllm_config import EngineConfig, ResolvedEngine


class LinearCosts:
    """A decode step costs 10 ms + 1 ms per sequence; a prefill step 0.1 ms per token (as test_scheduler's)."""

    def decode_s(self, seqs: int, context_sum: float, max_context: int) -> float:
        return 0.010 + 0.001 * seqs

    def prefill_s(self, chunks, decode_seqs: int = 0, decode_context_sum: float = 0.0) -> float:
        return 0.0001 * (sum(q for q, _ in chunks) + decode_seqs)


def _run(host: HostCost, workers: int, pp: int):
    kv = KvPlan(80, 72, 10, 1, 1, block_bytes=1, block_size=16, blocks=10_000, window=None)
    engine = ResolvedEngine(EngineConfig(watermark=0.0), 8192, False, 4096, "flash_attn", "")
    return Scheduler(LinearCosts(), kv, engine, host, workers=workers, pp=pp).run(4, 100, 3)


def test_the_driver_pays_a_fixed_part_and_a_part_per_worker_beyond_itself():
    host = serial_host(step_s=1e-3, per_seq_s=1e-5, tp_step_s=0.5e-3, per_worker_s=0.1e-3)
    assert host.step(4, 0, workers=1).serial_s == pytest.approx(1e-3 + 4e-5)  # one GPU: no broadcast
    # 8 workers: the fixed 0.5 ms and 7 workers beyond the driver at 0.1 ms each
    assert host.step(4, 0, workers=8).serial_s == pytest.approx(1e-3 + 4e-5 + 0.5e-3 + 7 * 0.1e-3)
    assert host.step(4, 0, workers=8).serial_s - host.step(4, 0, workers=4).serial_s == pytest.approx(4 * 0.1e-3)


def test_virtual_engines_share_the_drivers_host_time():
    host = serial_host(step_s=0.020, per_seq_s=0.0)
    one, two = _run(host, 1, 1), _run(host, 2, 2)
    # a decode step of 4 sequences: 10 + 4 x 1 = 14 ms of GPU and 20 ms of host; with two virtual engines the
    # driver's host parts of both run in turn, so a step takes max(14 + 20, 2 x 20) = 40 ms, not 34
    decode_one = [s.finish_s - s.first_token_s for s in one.seqs][0] / 2
    decode_two = [s.finish_s - s.first_token_s for s in two.seqs][0] / 2
    assert decode_one == pytest.approx(0.034) and decode_two == pytest.approx(0.040)


@pytest.fixture(scope="module")
def seventy():
    from perfpredict.llm.vllm_engine import setup

    small = EngineConfig(max_num_seqs=16)  # small step tables: the arithmetic is the same at any size
    v0 = EngineOptions(engine="vllm", version="0.6")  # decode steps replay whole graphs (V1's are piecewise)
    return {pp: setup("llama-2-70b", device="H100-SXM", tp=4, pp=pp, engine=small, options=v0) for pp in (1, 2)}


def test_a_pipeline_step_passes_every_stage_in_turn_and_sends_between_them(seventy):
    one, two = seventy[1], seventy[2]
    assert two.model.spec.layers == 40 and two.gpus == 8 and two.model.comm.pp == 2
    c, seqs = two.costs, 8
    stage = c._lookup(c._dense["cuda_graph"], c._token_columns, seqs) + c._decode_attention(
        seqs, 1000, 1000, "cuda_graph"
    )
    head = c._lookup(c._head["cuda_graph"], c._seq_columns, seqs)
    # two stages of 40 layers each, the head once, and the same 161 all-reduces plus one send of 8 x 8,192 fp16
    assert c.decode_s(seqs, seqs * 1000, 1000) == pytest.approx(2 * stage + head + c.collectives_s(seqs, seqs))
    send = two.model.comm.send_recv_s(seqs * 8192 * 2)
    assert c.collectives_s(seqs, seqs) == pytest.approx(one.costs.collectives_s(seqs, seqs) + send)


def test_virtual_engines_split_the_kv_blocks_and_the_batch(seventy):
    one, two = seventy[1], seventy[2]
    assert two.engine_kv.blocks == two.kv.blocks // 2 and one.engine_kv.blocks == one.kv.blocks
    assert two.engine_batch(33) == 17 and one.engine_batch(33) == 33  # the least-loaded engine takes each request
    per_engine = min(two.engine_kv.max_seqs_at(2048), 16)
    assert two.largest_batch(2048) == 2 * per_engine
    # a stage holds half the layers: per GPU, half the layer weights and twice the KV blocks of a 4-GPU engine
    layer = two.kv.weights_bytes - (one.kv.weights_bytes - two.kv.weights_bytes)
    assert two.kv.blocks > 1.9 * one.kv.blocks and layer > 0


def test_a_pipeline_answer_runs_one_virtual_engines_share_and_refuses_hf_and_too_many_stages():
    from perfpredict.llm.generation import predict_generation
    from perfpredict.llm.vllm_engine import predict_vllm

    small = EngineConfig(max_num_seqs=16)
    r = predict_vllm("llama-2-70b", device="H100-SXM", tp=4, pp=2, batch=8, prompt_tokens=256, new_tokens=16,
                     engine=small, sweep=False)  # fmt: skip
    assert (
        r.pp == 2
        and r.tp == 4
        and "pipeline parallel" in r.assumptions
        and "8 GPU workers" in r.assumptions["host cost"]
    )
    with pytest.raises(InvalidInputError, match="pipeline parallelism is modelled for the serving engines"):
        predict_generation("gpt2", device="H100-SXM", engine="hf", pp=2)
    with pytest.raises(InvalidInputError, match="--pp 99 must be from 1 to the 80 layers"):
        predict_generation("llama-2-70b", device="H100-SXM", tp=4, pp=99)


def test_expert_parallelism_splits_whole_experts_over_the_gpus():
    spec = spec_from("mixtral-8x7b")  # 8 experts of 14,336 features, 2 per token
    tp, ep = rank_shape(spec, 2), rank_shape(spec, 2, expert_parallel=True)
    assert (tp.experts, tp.expert_intermediate, tp.ep) == (8, 7168, 1)
    assert (ep.experts, ep.expert_intermediate, ep.ep) == (4, 14336, 2)
    assert sum(weight_elements(spec, ep)) == sum(weight_elements(spec, tp))  # the same weights, split otherwise
    with pytest.raises(InvalidInputError, match="has none"):
        rank_shape(spec_from("llama-2-7b"), 2, expert_parallel=True)
    with pytest.raises(InvalidInputError, match=r"does not split the 8 experts .* choose tp from 2, 4, 8"):
        rank_shape(spec, 3, expert_parallel=True)
    num = Numerics("bfloat16", "bfloat16", 2.0)
    graph = step_graph(spec, ep, StepShape(3, 1, 100), num)
    w13 = next(n for n in graph.nodes if n.module_path.endswith("layers.0.block_sparse_moe.experts.w13"))
    # the busiest rank: ceil(3 tokens x 2 experts / 2 ranks) = 3 token-expert pairs through full-width experts
    assert w13.inputs[0].shape == (3, 4096) and w13.outputs[0].shape == (3, 2 * 14336)


def test_expert_parallel_steps_dispatch_and_combine_by_all_to_all():
    from perfpredict.llm.engine_assumptions import assumptions
    from perfpredict.llm.vllm_engine import setup
    from perfpredict.parallel.collectives import ALL_GATHER, REDUCE_SCATTER

    s = setup("mixtral-8x7b", device="H100-SXM", tp=4, engine=EngineConfig(enable_expert_parallel=True))
    comm, tokens = s.model.comm, 8
    act = tokens * 4096 * 2
    pairs = -(-tokens * 2 // 4) * 4096 * 2  # each rank's share of the token-expert pairs, fp16
    logits = tokens * s.model.rank.vocab * 4 * 2
    per_layer = comm.all_reduce_s(act) + comm.nccl_s(REDUCE_SCATTER, act) + comm.nccl_s(ALL_GATHER, act)
    per_layer += 2 * comm.all_to_all_s(pairs)
    expected = 32 * per_layer + comm.all_reduce_s(act) + comm.all_gather_s(logits)
    assert s.costs.collectives_s(tokens, tokens) == pytest.approx(expected)
    assert "all-to-all dispatch" in assumptions(s)["expert parallel"]


def test_generate_and_the_web_page_pass_pp_and_the_collective_settings_on(monkeypatch):
    from perfpredict.cli import main
    from perfpredict.web.compare import Question, compare

    asked = {}

    def answer(source, generation, **_):
        asked.update(pp=generation.pp, tp=generation.tp, engine_config=generation.engine.settings)
        raise InvalidInputError("stop")

    monkeypatch.setattr("perfpredict.llm.answer_cache.cached_generation", answer)
    argv = ["generate", "--hf", "mixtral-8x7b", "--tp", "4", "--pp", "2", "--disable-custom-all-reduce",
            "--enable-expert-parallel"]  # fmt: skip
    assert main(argv) == 2
    assert asked["pp"] == 2 and asked["engine_config"].disable_custom_all_reduce
    assert asked["engine_config"].enable_expert_parallel
    asked.clear()
    q = Question(model="mixtral-8x7b", phase="generation", parallel={"tp": 4, "pp": 2}, devices=("H100-SXM",),
                 disable_custom_all_reduce=True, enable_expert_parallel=True)  # fmt: skip
    with pytest.raises(InvalidInputError, match="stop"):
        compare(q)
    assert asked["tp"] == 4 and asked["pp"] == 2 and asked["engine_config"].enable_expert_parallel
