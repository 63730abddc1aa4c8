"""Predicted message sizes against what torch.distributed sends for the same plan (two gloo processes on CPU).

One spawn runs three plans with every collective recorded (parallel_gloo.py): a Megatron-style tensor-parallel
decoder (checked against the unsplit model's output), DDP at its default buckets, and FSDP2's fully_shard per
layer. The predictions come from perfpredict's own capture of the same models.
"""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

pytestmark = pytest.mark.slow  # one spawn of two gloo processes: 4-6 s on a 2-core host

from parallel_gloo import WORLD, run_all  # noqa: E402
from parallel_models import ShardedNet, bucketed_net, capture  # noqa: E402

from perfpredict.core.units import MIB  # noqa: E402
from perfpredict.parallel import data_parallel as dpm  # noqa: E402
from perfpredict.parallel import tensor_parallel  # noqa: E402
from perfpredict.parallel.dp_timing import units_of  # noqa: E402
from perfpredict.parallel.structure import layer_labels  # noqa: E402


@pytest.fixture(scope="module")
def sent():
    result = run_all()
    assert "error" not in result, result
    return result


def _units(graph):
    return units_of(graph, layer_labels(graph), {}, {})


def test_the_megatron_split_computes_what_the_whole_model_does(sent):
    # otherwise the byte counts below would compare against a wrong split
    assert sent["tp"]["matches_full_model"]


def test_tensor_parallel_collectives_are_the_ones_sent(decoder_graphs, sent):
    training, _ = decoder_graphs
    predicted = sorted((c.kind, c.phase, c.size_bytes) for c in tensor_parallel.shard(training, WORLD).collectives)
    recorded = sorted(sent["tp"]["calls"])
    # 2 layers x (attention, MLP): an all-reduce of 3*10*48 float32 = 5760 bytes each way
    assert predicted == recorded
    assert len(predicted) == 8 and {size for _, _, size in predicted} == {3 * 10 * 48 * 4}


def test_ddp_buckets_are_the_ones_reduced(sent):
    torch.manual_seed(0)
    graph = capture(bucketed_net(), "training", shape=(4, 1024))
    predicted = [c.size_bytes for c in dpm.ddp_comms(_units(graph), grad_bytes_per_param=4, cap_mb=25.0)]
    steady = sent["ddp"]["buckets"][-1]  # DDP rebuilds its buckets after the first step
    # the first bucket (capped at 1 MiB) closes on one 4 MiB gradient, the next (25 MiB) at 7 x 4 = 28 MiB
    assert predicted == steady == [4 * MIB, 28 * MIB]
    assert sum(predicted) == sent["ddp"]["param_bytes"]


def test_fsdp2_gathers_and_scatters_what_is_predicted(sent):
    torch.manual_seed(0)
    graph = capture(ShardedNet(), "training", shape=(4, 32))
    comms = dpm.fsdp_comms(_units(graph), param_bytes_per_param=4, grad_bytes_per_param=4, reduce=True)
    predicted = Counter((c.kind, c.phase, c.size_bytes) for c in comms)
    recorded = Counter(sent["fsdp"]["calls"])
    assert predicted == recorded
    # the root (embed 32x64+64, head 64x16+16 = 3152 parameters) is gathered once; each layer twice
    assert recorded[("all_gather", "forward", 3152 * 4)] == 1


def test_fsdp2_holds_one_shard_of_parameters_and_optimizer_state(sent):
    from perfpredict.parallel.memory import PerParam, sharded_state

    fsdp = sent["fsdp"]
    assert fsdp["local_params"] * WORLD == fsdp["params"]
    assert fsdp["local_optimizer_values"] == 2 * fsdp["local_params"]  # AdamW: exp_avg and exp_avg_sq
    fp32_adamw = PerParam(weights=4, gradients=4, optimizer_state=8, weight_copies=0, gathered=4)
    state = sharded_state(fsdp["params"], fp32_adamw, stage=3, ranks=WORLD)
    assert state.weights_bytes == fsdp["local_params"] * 4
    assert state.optimizer_state_bytes == fsdp["local_optimizer_values"] * 4
