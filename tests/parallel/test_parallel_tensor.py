"""Tensor parallelism: a rank's graph is the graph of a Megatron rank, op for op, and its collectives are Megatron's."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from parallel_models import BATCH, HIDDEN, SEQ, TinyDecoder, capture  # noqa: E402

from perfpredict.core import ops  # noqa: E402
from perfpredict.core.errors import InvalidInputError  # noqa: E402
from perfpredict.parallel import tensor_parallel, tp_roles  # noqa: E402
from perfpredict.parallel.structure import backward_start, layer_labels  # noqa: E402

ACTIVATION_BYTES = BATCH * SEQ * HIDDEN * 4  # 3 x 10 x 48 float32 = 5760


def _compute_ops(graph):
    return [
        (n.op, n.flops, [t.shape for t in n.inputs[:2]], [t.shape for t in n.outputs[:1]])
        for n in graph.nodes
        if n.op in (ops.MATMUL, ops.ATTENTION)
    ]


@pytest.mark.parametrize("phase", ["inference", "training"])
@pytest.mark.parametrize("tp", [2, 4])
def test_a_rank_is_the_graph_of_a_megatron_rank(decoder_graphs, phase, tp):
    full = decoder_graphs[0] if phase == "training" else decoder_graphs[1]
    rank = tensor_parallel.shard(full, tp).graph
    torch.manual_seed(0)
    captured = capture(TinyDecoder(shards=tp), phase)  # the model built with 1/tp of every projection
    assert _compute_ops(rank) == _compute_ops(captured)  # every matmul and attention: shapes and FLOPs
    assert rank.total_flops == captured.total_flops
    assert rank.param_count == captured.param_count


def test_megatron_collectives_per_layer(decoder_graphs):
    training, inference = decoder_graphs
    forward = tensor_parallel.shard(inference, 2).collectives
    both = tensor_parallel.shard(training, 2).collectives
    # g after each row linear (o_proj, down_proj) in the forward; f before each column group in the backward
    assert [(c.kind, c.phase) for c in forward] == [("all_reduce", "forward")] * 4
    assert sorted((c.kind, c.phase) for c in both) == [("all_reduce", "backward")] * 4 + [("all_reduce", "forward")] * 4
    assert {c.size_bytes for c in both} == {ACTIVATION_BYTES}
    assert all(training.nodes[c.node].op == ops.MATMUL for c in both)


def test_sequence_parallel_moves_the_same_bytes_and_splits_the_norms(decoder_graphs):
    training, _ = decoder_graphs
    plain = tensor_parallel.shard(training, 2)
    seq = tensor_parallel.shard(training, 2, sp=True)
    kinds = [c.kind for c in seq.collectives if not c.hidden]
    assert "all_reduce" not in kinds and kinds.count("reduce_scatter") == 8  # 4 forward, 4 backward
    # each all-reduce became a reduce-scatter and an all-gather of the same S: the same bus traffic
    assert sum(c.size_bytes for c in seq.collectives if not c.hidden and c.kind == "reduce_scatter") == sum(
        c.size_bytes for c in plain.collectives
    )
    norms = [
        (a.outputs[0].shape, b.outputs[0].shape)
        for a, b in zip(training.nodes, seq.graph.nodes)
        if a.module_path.endswith("input_layernorm") and len(a.outputs[0].shape) == 3 and a.outputs[0].shape[1] == SEQ
    ]
    assert norms and all(new[1] == SEQ // 2 for _, new in norms)  # 10 tokens of each sequence -> 5
    assert seq.graph.total_bytes < plain.graph.total_bytes


def test_roles_come_from_names_or_from_dataflow(decoder_graphs):
    training, _ = decoder_graphs
    roles = tp_roles.assign_roles(training, backward_start(training), layer_labels(training))
    kinds = {path.rsplit(".", 1)[-1]: r.kind for path, r in roles.items()}
    assert kinds == {
        "q_proj": "column",
        "k_proj": "column",
        "v_proj": "column",
        "o_proj": "row",
        "gate_proj": "column",
        "up_proj": "column",
        "down_proj": "row",
    }

    class Unnamed(torch.nn.Module):  # linears with names nobody lists: the dataflow pairs them
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(
                torch.nn.ModuleDict({"widen": torch.nn.Linear(16, 64), "narrow": torch.nn.Linear(64, 16)})
                for _ in range(2)
            )

        def forward(self, x):
            for block in self.layers:
                x = x + block["narrow"](torch.relu(block["widen"](x)))
            return x

    graph = capture(Unnamed(), "inference", shape=(2, 5, 16))
    roles = tp_roles.assign_roles(graph, len(graph.nodes), layer_labels(graph))
    assert sorted((p.rsplit(".", 1)[-1], r.kind) for p, r in roles.items()) == [
        ("narrow", "row"),
        ("narrow", "row"),
        ("widen", "column"),
        ("widen", "column"),
    ]


def test_a_degree_that_does_not_split_evenly_is_refused_with_the_choices(decoder_graphs):
    training, _ = decoder_graphs
    with pytest.raises(InvalidInputError, match=r"tp=3 .* 8 attention heads.* choose tp from 1, 2, 4"):
        tensor_parallel.shard(training, 3)
    with pytest.raises(InvalidInputError, match=r"4 key/value heads"):
        tensor_parallel.shard(training, 8)


def test_huggingface_module_paths_are_recognised():
    pytest.importorskip("transformers")
    from perfpredict.api import featurize
    from perfpredict.compiler_hooks import hf_frontend as hf

    configs = {
        "llama": dict(
            model_type="llama",
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=8,
            num_key_value_heads=4,
            intermediate_size=96,
            vocab_size=256,
            max_position_embeddings=64,
            architectures=["LlamaForCausalLM"],
        ),
        "gpt2": dict(
            model_type="gpt2",
            n_layer=2,
            n_embd=64,
            n_head=4,
            vocab_size=256,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=0,
            architectures=["GPT2LMHeadModel"],
        ),
        "bert": dict(
            model_type="bert",
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            intermediate_size=96,
            vocab_size=256,
            max_position_embeddings=64,
        ),
    }
    expected = {
        "llama": {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "lm_head"},
        "gpt2": {"c_attn", "c_fc", "lm_head"},
        "bert": {"query", "key", "value", "intermediate.dense"},
    }
    for name, fields in configs.items():  # Llama's training graph (mm ops, backward); the others' forward (linear)
        config = hf.config_from_dict(fields, name=name)
        phase = "training" if name == "llama" else "inference"
        graph = featurize(hf.build_model(config), hf.example_inputs(config, 2, 16), phase=phase, name=name)
        roles = tp_roles.assign_roles(graph, backward_start(graph), layer_labels(graph))
        columns = {
            ".".join(p.split(".")[-2:]) if p.endswith("dense") else p.split(".")[-1]
            for p, r in roles.items()
            if r.kind == "column"
        }
        assert columns == expected[name], name
        shard = tensor_parallel.shard(graph, 2)
        rank = shard.graph
        # Megatron's f and g per block, plus the vocabulary-parallel embedding's forward all-reduce (g) and, in
        # training, the LM head's input-gradient all-reduce (f): 1 + 2 x 2 layers each way
        counts = Counter((c.kind, c.phase) for c in shard.collectives)
        per_step = {("all_reduce", "forward"): 5} | ({("all_reduce", "backward"): 5} if phase == "training" else {})
        assert counts == per_step, name
        assert all(c.what and not c.what.startswith(" ") for c in shard.collectives), name  # each names its module
        split = {
            (a.module_path.endswith("pooler.dense"), b.flops / a.flops)
            for a, b in zip(graph.nodes, rank.nodes)
            if a.op == ops.MATMUL and a.flops
        }
        # every matmul of a split linear runs half its FLOPs; BERT's pooler (outside the layers) stays whole
        assert split == ({(False, 0.5), (True, 1.0)} if name == "bert" else {(False, 0.5)}), name


def test_weight_and_input_gradients_are_told_apart_when_tokens_equal_the_width():
    # 4 x 12 = 48 tokens, as wide as the hidden size: a weight gradient (48 x 48) and an input gradient (tokens x
    # 48) have the same shape, so only the dataflow (which one becomes a parameter gradient) can tell them apart
    shape = (4, 12, HIDDEN)
    torch.manual_seed(0)
    full = capture(TinyDecoder(), "training", shape=shape)
    rank = capture(TinyDecoder(shards=2), "training", shape=shape)
    seq = tensor_parallel.shard(full, 2, sp=True)
    assert _compute_ops(tensor_parallel.shard(full, 2).graph) == _compute_ops(rank)
    counts = Counter((c.kind, c.phase, c.hidden) for c in seq.collectives)
    # per layer: gather before q/k/v and gate/up, scatter after o and down; the backward mirrors it, and gathers
    # each column group's input again for its weight gradient
    assert counts == {
        ("all_gather", "forward", False): 4,
        ("reduce_scatter", "forward", False): 4,
        ("all_gather", "backward", False): 4,
        ("reduce_scatter", "backward", False): 4,
        ("all_gather", "backward", True): 4,
    }
