"""The linear layers of a captured training graph that training recipes change: the matmuls of the repeated blocks
that read a weight. float8 training converts them (torchao's ``convert_to_float8_training`` converts every
``nn.Linear`` but the output head in torchtitan); QLoRA stores their frozen weights in NF4 (bitsandbytes quantizes
every linear but ``lm_head``).

In an AOTAutograd graph a linear is ``mm(x, t(weight))``: the weight is read by a view (``t``), which carries the
parameter count (``params``) and, in a training graph, how many of those parameters are frozen
(``attrs["frozen_params"]``, a LoRA run's base)."""

from __future__ import annotations

from perfpredict.compiler_hooks.graph_edit import view_roots
from perfpredict.compiler_hooks.recompute import block_of, forward_end
from perfpredict.core import ops
from perfpredict.core.graph import OpGraph

_RECIPE_OPS = ("nf4", "float8_cast")  # ops a recipe puts between a weight and its matmul (attrs keys)


def block_weights(graph: OpGraph) -> list[int]:
    """The ops that read a block linear's weight (the weight's view, or the matmul itself where it reads the
    parameter directly), for every forward matmul of a repeated block; through the dequantize and float8 casts the
    recipes put between them."""
    root, start = view_roots(graph, through=_RECIPE_OPS), forward_end(graph)
    found = {i for i in range(start) if graph.nodes[i].op == ops.MATMUL and graph.nodes[i].params}
    for a, b in graph.edges:
        weight = graph.nodes[root[a]]  # a view of a parameter (an op that reads one and computes is not a weight)
        if b < start and graph.nodes[b].op == ops.MATMUL and weight.params and weight.is_view:
            found.add(root[a])
    return sorted(i for i in found if block_of(graph.nodes[i].module_path))


def block_linear_paths(graph: OpGraph) -> set[str]:
    """Module paths of the blocks' linears (the forward matmuls that read their weights)."""
    root, start, weights = view_roots(graph, through=_RECIPE_OPS), forward_end(graph), set(block_weights(graph))
    paths = {graph.nodes[i].module_path for i in weights if graph.nodes[i].op == ops.MATMUL}
    paths.update(
        graph.nodes[b].module_path
        for a, b in graph.edges
        if b < start and graph.nodes[b].op == ops.MATMUL and root[a] in weights
    )
    return paths


def frozen_linear_params(graph: OpGraph) -> int:
    """Frozen weights of the blocks' linears (a LoRA run's base layers): the weights QLoRA stores in NF4."""
    return sum(int(graph.nodes[i].attrs.get("frozen_params", 0)) for i in block_weights(graph))


def linear_params(graph: OpGraph) -> int:
    """Weights of the blocks' linears."""
    return sum(graph.nodes[i].params for i in block_weights(graph))
