"""QLoRA: a LoRA run whose frozen base linears are stored in 4-bit NF4 (bitsandbytes ``Linear4bit``) and
dequantized to the compute dtype by every matmul that reads them.

bitsandbytes' ``MatMul4Bit`` dequantizes the weight (``dequantize_4bit``) and runs a half-precision matmul, in the
forward and again in the backward for the input's gradient (the frozen weight has none of its own). Each of those
matmuls gets a dequantize op before it here: it reads the NF4 weight (4 bits, and the quantization constants:
``hardware.precision.NF4_BYTES_PER_PARAM``) and writes the weight in the compute dtype, which lives until the matmul
has read it. The weights term of the memory holds the NF4 bytes (``memory_model.held_options``).
"""

from __future__ import annotations

import math
from types import MappingProxyType

from perfpredict.compiler_hooks.graph_edit import Editor, view_roots
from perfpredict.compiler_hooks.linears import block_weights
from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta
from perfpredict.hardware.precision import NF4_BYTES_PER_PARAM

NOTE = (
    "QLoRA: the frozen base linears in NF4 with double quantization (4.127 bits a weight), dequantized to the "
    "compute dtype before each matmul that reads them, forward and backward (bitsandbytes MatMul4Bit)"
)


def apply(graph: OpGraph) -> OpGraph:
    """``graph`` with a dequantize op before every matmul that reads a frozen block weight."""
    if any(n.attrs.get("nf4") for n in graph.nodes):
        return graph
    frozen = {i for i in block_weights(graph) if graph.nodes[i].attrs.get("frozen_params")}
    if not frozen:
        raise InvalidInputError(
            f"qlora=True stores a LoRA run's frozen base in NF4, and {graph.name or 'this model'!r} has no frozen "
            "linear weight: add lora_rank (--lora-rank 16), or freeze the base with peft before capturing"
        )
    root = view_roots(graph)
    edit = Editor(graph)
    for a, b in graph.edges:
        mm = graph.nodes[b]
        if mm.op != ops.MATMUL or root[a] not in frozen:
            continue
        count = int(graph.nodes[root[a]].attrs["frozen_params"])
        weight = next((t for t in mm.inputs if t.numel == count), TensorMeta((count,), graph.dtype))
        node = OpNode(
            name=f"dequantize_nf4_{b}",
            op=ops.ELEMENTWISE,
            target="dequantize_4bit",
            inputs=(TensorMeta((math.ceil(count / 2),), "uint8"),),
            outputs=(weight,),
            flops=2 * count,  # a table lookup and a scale per weight
            bytes_read=math.ceil(count * NF4_BYTES_PER_PARAM),
            bytes_written=weight.nbytes,
            attrs=MappingProxyType({"kind": "mul", "nf4": True}),
            module_path=mm.module_path,
        )
        edit.reroute(a, b, edit.before(b, node, (a,)))
    return edit.build(NOTE)
