"""Activation checkpointing as a rewrite of a training OpGraph: a checkpointed region keeps only what its backward
cannot recompute, and recomputes the rest just before its backward, as ``torch.utils.checkpoint`` does.

A training graph (AOTAutograd's joint graph) lists the forward, then the backward. For each checkpointed region,
the forward ops its own backward reads are copied, in forward order, just before the first backward op of the
region; the backward reads the copies instead. The originals then die after their last forward use, the region's
inputs (and, under selective checkpointing, the outputs it saves) live on until the recompute reads them, and the
copies live from the recompute to their last backward use. The memory walk and every predictor then see the
checkpointed step as it runs: the saved activations follow the policy and the recompute is ops of its own
(``attrs["recompute"]``), timed like any other and reported on their own line.

Policies (``Request.activation_checkpointing``):

- ``None``: the model's own regions: ``torch.utils.checkpoint`` calls and HF's ``gradient_checkpointing_enable()``,
  which the capture tags (``attrs["checkpoint"]``: the meta capture records the calls, dynamo's
  ``tag_activation_checkpoint`` tags the joint graph);
- ``"none"``: no checkpointing, even where the model asks for it;
- ``"full"``: every repeated block (a module path with an index, ``model.layers.3``) recomputes its forward and
  keeps only its input, as torchtitan's ``mode="full"`` wraps each transformer block;
- ``"every-<k>"``: every k-th block, counting from 1 (torchtitan's ``selective_ac_option = k``);
- ``"selective-op"``: every block saves the outputs of its matmuls and attention and recomputes the cheap ops
  between them: the policy ``torch.utils.checkpoint.create_selective_checkpoint_contexts`` applies with
  ``CheckpointPolicy.MUST_SAVE`` for the compute-intensive ops (``aten.mm`` and the fused SDPA kernels, the save
  list of torchtitan's op-level SAC) and ``PREFER_RECOMPUTE`` for the rest. Saved outputs are held from the forward
  to the recompute, as SAC's cache holds them. torchtitan recomputes every second ``mm`` as well; this does not.

A region recomputes its ops up to the last one its backward reads (non-reentrant checkpoint's early stop; the
ops after it, a block's closing residual add, feed only the next block, which saves it as its input).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import OpGraph

FULL, SELECTIVE, NONE = "full", "selective-op", "none"
_ALIASES = {"selective": SELECTIVE, "op": SELECTIVE, "block": FULL}
_EVERY = re.compile(r"^every-(\d+)$")
#: ops whose outputs selective checkpointing saves (torchtitan's op-level SAC save list: mm and the fused SDPA)
SAVED_KINDS = frozenset({ops.MATMUL, ops.ATTENTION})
#: the model's own regions (no policy named)
MODEL = "model"
_BLOCK = re.compile(r"^(.*?(?:^|\.)\d+)(?:\.|$)")
_ROOT = re.compile(r"^L\[[^\]]*\](\[\d+\])?\.?")


@dataclass(frozen=True)
class Policy:
    kind: str  # "none", "full", "selective-op", or "model" (the model's own regions)
    every: int = 1  # full: checkpoint every k-th block

    @property
    def label(self) -> str:
        return f"every-{self.every}" if self.kind == FULL and self.every > 1 else self.kind


def parse_policy(value: str | None) -> Policy | None:
    """The policy ``value`` names (None: the model's own regions); anything else is refused with the choices."""
    if value is None:
        return None
    text = value.strip().lower() if isinstance(value, str) else ""
    text = _ALIASES.get(text, text)
    if text in (NONE, FULL, SELECTIVE):
        return Policy(text)
    every = _EVERY.match(text)
    if every and int(every.group(1)) >= 1:
        return Policy(FULL, int(every.group(1)))
    raise InvalidInputError(
        f"activation_checkpointing={value!r} is not one of 'none', 'full', 'selective-op' or 'every-<k>' (every k-th "
        "block, e.g. 'every-2'); leave it unset to follow the model's own torch.utils.checkpoint regions"
    )


def forward_end(graph: OpGraph) -> int:
    """The first backward op: after the forward's last output (the loss), as the joint graph lists them."""
    if graph.phase != "training":
        return len(graph.nodes)
    outputs = graph.keep_alive - graph.grad_outputs
    return max(outputs) + 1 if outputs else graph.backward_start


def block_of(module_path: str) -> str | None:
    """The repeated block a module path lies in: the path up to its first index (``model.layers.3.mlp`` ->
    ``model.layers.3``); None outside any block."""
    match = _BLOCK.match(_ROOT.sub("", module_path))
    return match.group(1) if match else None


def apply(graph: OpGraph, value: str | None) -> OpGraph:
    """``graph`` with the checkpointing policy ``value`` applied (see the module docstring). A graph whose
    checkpointing is already applied (it holds recompute ops) is returned as it is."""
    policy = parse_policy(value)
    if any(n.attrs.get("recompute") for n in graph.nodes):
        return graph
    if graph.phase != "training":
        if policy is not None and policy.kind != NONE:
            raise InvalidInputError(
                f"activation_checkpointing={value!r} recomputes a training step's forward in its backward; predict a "
                "training step (--training, phase='training') or drop it"
            )
        return graph
    start = forward_end(graph)
    regions = _regions(graph, start, policy, value)
    if not regions:
        return graph
    rewritten = _rewrite(graph, start, regions, policy.label if policy else MODEL)
    if policy is None and any(r.ident < 0 for r in regions):
        from perfpredict.compiler_hooks.checkpoint_regions import SELECTIVE_NOTE

        rewritten = replace(rewritten, notes=(*rewritten.notes, SELECTIVE_NOTE))
    return rewritten


@dataclass(frozen=True)
class _Region:
    nodes: tuple[int, ...]  # its forward ops, in order
    saved: frozenset[int]  # ops whose outputs it keeps (selective)
    ident: int = 0  # the model's region id (negative: a selective policy the capture could not read)


def _regions(graph: OpGraph, start: int, policy: Policy | None, value: str | None) -> list[_Region]:
    if policy is None:  # the model's own regions, as the capture tagged them
        tagged: dict[int, list[int]] = {}
        for i in range(start):
            region = graph.nodes[i].attrs.get("checkpoint")
            if region is not None:
                tagged.setdefault(region, []).append(i)
        return [
            _Region(tuple(nodes), frozenset(i for i in nodes if graph.nodes[i].attrs.get("checkpoint_save")), ident)
            for ident, nodes in tagged.items()
        ]
    if policy.kind == NONE:
        return []
    blocks: dict[str, list[int]] = {}
    previous = None
    for i in range(start):
        path = graph.nodes[i].module_path
        key = block_of(path) if path else previous
        if key is not None:
            blocks.setdefault(key, []).append(i)
        previous = key
    if not blocks:
        raise InvalidInputError(
            f"activation_checkpointing={value!r} checkpoints the model's repeated blocks (module paths with an index, "
            f"such as model.layers.3), and {graph.name or 'this model'!r} has none; checkpoint its regions in the "
            "model with torch.utils.checkpoint and leave the option unset, or drop it"
        )
    chosen = [nodes for k, nodes in enumerate(blocks.values()) if (k + 1) % policy.every == 0]
    selective = policy.kind == SELECTIVE
    return [_Region(tuple(nodes), _saved(graph, nodes) if selective else frozenset()) for nodes in chosen]


def _saved(graph: OpGraph, nodes: Sequence[int]) -> frozenset[int]:
    """Selective checkpointing's saves: the matmuls and attention of the region, and the views of them (an
    attention's output and log-sum-exp picked out of its tuple), which cost nothing and stay what they view."""
    mine = set(nodes)
    producer: dict[int, int] = {}
    for a, b in graph.edges:
        if b in mine:
            producer.setdefault(b, a)
    saved: set[int] = set()
    for i in nodes:  # forward order: a view's base comes before it
        node = graph.nodes[i]
        if node.op in SAVED_KINDS or (node.is_view and producer.get(i) in saved):
            saved.add(i)
    return frozenset(saved)


def _paths_forward(graph: OpGraph, start: int) -> list[str]:
    """Each backward op's module path; one without a path takes the op's before it (a gradient's add or view)."""
    out, previous = [], ""
    for node in graph.nodes[start:]:
        previous = node.module_path or previous
        out.append(previous)
    return out


@dataclass(frozen=True)
class _Plan:
    """One region's rewrite: the ops it recomputes, where, and which backward ops read the copies."""

    recompute: tuple[int, ...]
    at: int  # the backward op the copies run before
    readers: frozenset[int]  # the region's own backward ops
    saved: frozenset[int]
    region: int


def _plans(graph: OpGraph, start: int, regions: list[_Region]) -> list[_Plan]:
    backward_paths = _paths_forward(graph, start)
    readers_of: dict[int, list[int]] = {}
    for a, b in graph.edges:
        if a < start <= b:
            readers_of.setdefault(a, []).append(b)
    plans = []
    for k, region in enumerate(regions):
        paths = {graph.nodes[i].module_path for i in region.nodes if graph.nodes[i].module_path}
        own = frozenset(b for b in range(start, len(graph.nodes)) if backward_paths[b - start] in paths)
        needed = [a for a in region.nodes if a not in region.saved and any(b in own for b in readers_of.get(a, ()))]
        if not needed or not own:
            continue
        last = max(needed)
        recompute = tuple(i for i in region.nodes if i <= last and i not in region.saved and i not in graph.keep_alive)
        plans.append(_Plan(recompute, min(own), own, region.saved, k))
    return plans


def _rewrite(graph: OpGraph, start: int, regions: list[_Region], label: str) -> OpGraph:
    """The graph with each region's recompute copies inserted before its backward and read by it."""
    plans = _plans(graph, start, regions)
    if not plans:
        return graph
    before: dict[int, list[_Plan]] = {}
    for plan in plans:
        before.setdefault(plan.at, []).append(plan)
    nodes, position, copy_of = [], {}, {}
    region_of: dict[int, _Plan] = {}
    for i, node in enumerate(graph.nodes):
        for plan in before.get(i, ()):
            for j in plan.recompute:
                copy_of[j] = len(nodes)
                region_of[j] = plan
                nodes.append(_copy(graph.nodes[j], label, plan.region))
        position[i] = len(nodes)
        nodes.append(node)
    edges: set[tuple[int, int]] = set()
    for a, b in graph.edges:
        plan = region_of.get(a)
        redirected = plan is not None and b in plan.readers
        edges.add((copy_of[a] if redirected else position[a], position[b]))
        if b in copy_of:  # the copy reads the copy of its input where the region recomputes it, else the original
            same = a in copy_of and region_of[a] is region_of[b]
            edges.add((copy_of[a] if same else position[a], copy_of[b]))
    for plan in plans:  # selective: what the region saves is held until its recompute (SAC's cache)
        first = copy_of[plan.recompute[0]]
        edges.update((position[s], first) for s in plan.saved if not graph.nodes[s].is_view)
    flops = sum(graph.nodes[j].flops for plan in plans for j in plan.recompute)
    note = (
        f"activation checkpointing ({label}): {len(plans)} region(s) recompute their forward in the backward, "
        f"{flops / 1e9:,.1f} GFLOP (perfpredict.compiler_hooks.recompute)"
    )
    return replace(
        graph,
        nodes=tuple(nodes),
        edges=tuple(sorted(edges)),
        keep_alive=frozenset(position[i] for i in graph.keep_alive),
        grad_outputs=frozenset(position[i] for i in graph.grad_outputs),
        notes=(*graph.notes, note),
    )


def _copy(node, label: str, region: int):
    """A forward op as its recompute in the backward: the same op and cost, marked."""
    attrs = {k: v for k, v in node.attrs.items() if k not in ("checkpoint", "checkpoint_save")}
    attrs.update(recompute=label, recompute_region=region)
    return replace(node, name=f"{node.name}__recompute", attrs=MappingProxyType(attrs))


def recompute_summary(graph: OpGraph) -> tuple[str, int, int]:
    """(the policy's label, the regions recomputed, their FLOPs) of a checkpointed graph; ("", 0, 0) otherwise."""
    marked = [n for n in graph.nodes if n.attrs.get("recompute")]
    if not marked:
        return "", 0, 0
    regions = {n.attrs.get("recompute_region") for n in marked}
    return str(marked[0].attrs["recompute"]), len(regions), sum(n.flops for n in marked)
