"""Which linears Megatron-style tensor parallelism splits, and how: column-parallel (the output features are split:
q/k/v, gate/up, fc1) or row-parallel (the input features are split: o_proj, down_proj, fc2).

A linear is recognised by its module name where the name is a known one (``COLUMN_NAMES``, ``ROW_NAMES``). Where it
is not, the dataflow decides, as the pairing does in Megatron: a linear of a layer that reads a replicated
activation starts a split region (column), and one that reads an activation of a split region closes it (row).
The language-model head (``lm_head``, or a linear with as many outputs as the word embedding has rows) is
column-parallel over the vocabulary; other linears outside the layer stack (poolers, classifiers) stay replicated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfpredict.core import ops
from perfpredict.parallel.structure import POST, PRE, module_name

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph, OpNode, TensorMeta

COLUMN = "column"
ROW = "row"
COLUMN_NAMES = frozenset(
    {
        "q_proj",
        "k_proj",
        "v_proj",
        "qkv_proj",
        "query",
        "key",
        "value",
        "query_key_value",
        "c_attn",
        "Wqkv",
        "W_pack",
        "gate_proj",
        "up_proj",
        "gate_up_proj",
        "fc1",
        "c_fc",
        "w1",
        "w3",
        "dense_h_to_4h",
        "wi",
        "wi_0",
        "wi_1",
        "q",
        "k",
        "v",
        "q_lin",
        "k_lin",
        "v_lin",
        "lin1",
        "fc_in",
        "in_proj",
    }
)
ROW_NAMES = frozenset(
    {"o_proj", "out_proj", "c_proj", "down_proj", "fc2", "w2", "dense_4h_to_h", "wo", "o", "out_lin", "lin2", "fc_out"}
)
# "dense" alone says nothing; with its parent it does (BERT: intermediate.dense, output.dense, attention.output.dense)
COLUMN_PAIRS = frozenset({"intermediate.dense"})
ROW_PAIRS = frozenset({"output.dense", "attention.dense", "self_attention.dense", "attn.dense", "self_attn.dense"})
HEAD_NAMES = frozenset({"lm_head", "embed_out"})


@dataclass(frozen=True)
class Linear:
    """One split linear: ``out_features`` N and ``in_features`` K of its weight, and the group of column linears
    that read the same input (q, k and v): one all-reduce of their summed input gradient in the backward."""

    path: str
    kind: str
    out_features: int
    in_features: int
    group: str
    label: int


def matmul_operands(node: OpNode) -> tuple[int, int]:
    """Input positions of (activation, weight-like operand) of a matmul op."""
    return (1, 2) if node.target == "addmm" else (0, 1)


def forward_features(node: OpNode) -> tuple[int, int]:
    """(out_features N, in_features K) of a linear's forward matmul: its output's and its activation's last dim."""
    a, _ = matmul_operands(node)
    return node.outputs[0].shape[-1], node.inputs[a].shape[-1]


def name_role(path: str) -> str | None:
    parts = module_name(path).split(".")
    pair = ".".join(parts[-2:])
    if pair in COLUMN_PAIRS:
        return COLUMN
    if pair in ROW_PAIRS:
        return ROW
    return COLUMN if parts[-1] in COLUMN_NAMES else ROW if parts[-1] in ROW_NAMES else None


def linear_paths(graph: OpGraph, start: int) -> dict[str, int]:
    """Module paths of linears -> the index of their first forward matmul. A linear holds parameters and runs a
    matmul under its own path (an attention module runs matmuls but holds no weights of its own)."""
    with_params = {n.module_path for n in graph.nodes if n.params and n.module_path}
    out: dict[str, int] = {}
    for i in range(start):
        node = graph.nodes[i]
        if node.op == ops.MATMUL and node.module_path in with_params and node.outputs:
            out.setdefault(node.module_path, i)
    return out


def vocab_rows(graph: OpGraph) -> int:
    """Rows of the largest embedding table (the word embedding), 0 when there is none."""
    rows = [
        t.shape[0]
        for n in graph.nodes
        if n.op == ops.EMBEDDING and not n.attrs.get("backward")
        for t in n.inputs
        if len(t.shape) == 2 and t.dtype in ops.FLOAT_DTYPES
    ]
    return max(rows, default=0)


def assign_roles(graph: OpGraph, start: int, labels: list[int]) -> dict[str, Linear]:
    """Every split linear of the graph, by module path (a walk of the forward's dataflow)."""
    paths = linear_paths(graph, start)
    first = {i: p for p, i in paths.items()}
    preds = predecessors(graph)
    rows = vocab_rows(graph)
    split = [False] * start
    roles: dict[str, Linear] = {}
    for i in range(start):
        node = graph.nodes[i]
        reads_split = any(split[p] for p in preds[i] if p < start)
        if i in first:
            role = _role(node, labels[i], reads_split, rows)
            if role is not None:
                n_out, k_in = forward_features(node)
                parent = node.module_path.rsplit(".", 1)[0]
                roles[node.module_path] = Linear(
                    node.module_path, role, n_out, k_in, f"{labels[i]}:{parent}", labels[i]
                )
        role = roles.get(node.module_path)
        if role is not None and node.op == ops.MATMUL:
            split[i] = role.kind == COLUMN
        else:
            split[i] = reads_split
    return roles


def _role(node: OpNode, label: int, reads_split: bool, vocab: int) -> str | None:
    if label in (PRE, POST):  # outside the stack only the vocabulary head is split
        head = module_name(node.module_path).split(".")[-1] in HEAD_NAMES
        return COLUMN if (head or (vocab and forward_features(node)[0] == vocab)) and label == POST else None
    return name_role(node.module_path) or (ROW if reads_split else COLUMN)


def predecessors(graph: OpGraph) -> list[list[int]]:
    preds: list[list[int]] = [[] for _ in graph.nodes]
    for src, dst in graph.edges:
        preds[dst].append(src)
    return preds


@dataclass(frozen=True)
class Heads:
    """Attention heads per attention op and per head dim: what tensor parallelism splits."""

    heads: int
    kv_heads: int
    head_dim: int
    path: str


def attention_heads(graph: OpGraph, start: int, roles: dict[str, Linear]) -> list[Heads]:
    """Heads of each forward attention op: q is (batch, heads, seq, head_dim); key/value heads (grouped-query
    attention) are the k projection's outputs over head_dim where those are fewer than the heads."""
    out = []
    for i in range(start):
        node = graph.nodes[i]
        if node.op != ops.ATTENTION or not node.inputs or len(node.inputs[0].shape) != 4:
            continue
        q: TensorMeta = node.inputs[0]
        heads, dim = q.shape[1], q.shape[-1]
        group = [r for r in roles.values() if r.kind == COLUMN and r.path.startswith(node.module_path + ".")]
        kv = [r.out_features // dim for r in group if r.out_features % dim == 0 and r.out_features // dim < heads]
        out.append(Heads(heads, min(kv, default=heads), dim, node.module_path))
    return out
