"""The linear layers of a captured graph that training recipes change: the matmuls of the repeated blocks that
read a weight (float8 training converts them; QLoRA stores their frozen weights in NF4)."""

from __future__ import annotations

from perfpredict.compiler_hooks.recompute import block_of, forward_end
from perfpredict.core import ops
from perfpredict.core.graph import OpGraph


def block_linears(graph: OpGraph) -> list[int]:
    """Forward matmuls inside a repeated block that read a weight (``model.layers.3.mlp.up_proj``), in order: the
    ``nn.Linear`` layers torchao's ``convert_to_float8_training`` converts in torchtitan (every linear but the
    output head) and bitsandbytes quantizes for QLoRA (every linear but ``lm_head``)."""
    return [
        i
        for i in range(forward_end(graph))
        if graph.nodes[i].op == ops.MATMUL and graph.nodes[i].params and block_of(graph.nodes[i].module_path)
    ]


def frozen_linear_params(graph: OpGraph) -> int:
    """Frozen weights read by the blocks' linears (a LoRA run's base layers): the weights QLoRA stores in NF4."""
    return sum(int(graph.nodes[i].attrs.get("frozen_params", 0)) for i in block_linears(graph))


def linear_params(graph: OpGraph) -> int:
    """Weights read by the blocks' linears."""
    return sum(graph.nodes[i].params for i in block_linears(graph))
