"""Sub-graph reuse across a search's candidates: a block seen before is replayed, not traced again.

Candidates of one search space share blocks: FBNet's 22 layers take 9 choices each, so after a few dozen
candidates nearly every (layer, choice) has been seen on its input shape. While ``meta_trace`` records a candidate,
every module with children gets a forward wrapper (removed after the trace). A call is keyed by the module's
structure (its class, its plain attributes, its parameters' shapes and dtypes, its children's keys, its train
flag) and its inputs (shapes, strides, dtypes and plain values) and the run's dtype and grad mode. The first call
of a key runs the forward as usual and keeps the nodes it recorded as a template; a later call with the same key
emits the template's nodes again, on the new module's parameters and inputs, without running the forward or a
single meta kernel. The replayed nodes carry a key that lets ``graph_from_fx`` reuse the OpNode it made the first
time (``BlockCache.op_nodes``).

A call is only cached where replaying it is certain to give what tracing it gives: no module hooks, only plain
attributes, every node reading the block's inputs, its own parameters or its own nodes, and a result of tensors in
tuples, lists and dicts. Anything else (a block reading a tensor made outside it, a config object) is traced as
usual, every time.
"""

from __future__ import annotations

import operator
import types
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

_PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.memory_format)
# attributes every nn.Module has: its parameters, buffers, submodules and hook tables
_MODULE_INTERNALS = frozenset(torch.nn.Module().__dict__) | {"forward"}


@dataclass(frozen=True)
class _Template:
    """A recorded block call: its nodes (placeholders as parameter names), and where its output comes from."""

    ident: int
    nodes: tuple[tuple, ...]
    output: Any


@dataclass
class BlockCache:
    """Templates of block calls and the OpNodes made from them, shared by the candidates of one search."""

    templates: dict[tuple, _Template | None] = field(default_factory=dict)
    op_nodes: dict[tuple, Any] = field(default_factory=dict)
    # id(module) -> (module, its signature): shared by the captures of one candidate (at two batch sizes)
    signatures: dict[int, tuple] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def next_candidate(self) -> None:
        """Forget the last candidate's modules (their signatures are keyed by identity)."""
        self.signatures.clear()


class Reuse:
    """During one trace: wrap the model's blocks, replay known calls, record new ones."""

    def __init__(self, modules: list, cache: BlockCache, graph: Any, stand_ins: Any, paths: list[str]) -> None:
        self.modules, self.cache, self.graph, self.stand_ins, self.paths = modules, cache, graph, stand_ins, paths
        self.wrapped: list[Any] = []

    def __enter__(self) -> Reuse:
        for name, module in self.modules:
            if name and next(iter(module.children()), None) is not None and "forward" not in module.__dict__:
                module.forward = self._wrapper(module, module.forward)
                self.wrapped.append(module)
        return self

    def __exit__(self, *exc: Any) -> None:
        for module in self.wrapped:
            del module.forward

    def _wrapper(self, module: Any, forward: Any) -> Any:
        def reusing(*args: Any, **kwargs: Any) -> Any:
            # the bookkeeping reads tensors' shapes and makes tensors: none of it may reach the recorder
            with torch._C.DisableTorchFunction():
                key = self._key(module, args, kwargs)
                template = self.cache.templates.get(key) if key is not None else None
                if template is not None:
                    self.cache.hits += 1
                    return self._replay(template, module, args, kwargs)
                if key is None or key in self.cache.templates:  # uncacheable, or a call that could not be templated
                    template = None
                else:
                    self.cache.misses += 1
                    inputs = [self.stand_ins.node_of(t) for t in _input_tensors(args, kwargs)]
                    start = len(self.graph.log)
            out = forward(*args, **kwargs)
            if key is not None and key not in self.cache.templates:
                with torch._C.DisableTorchFunction():
                    self.cache.templates[key] = self._template(module, args, kwargs, inputs, start, out)
            return out

        return reusing

    # ---------------------------------------------------------------------------------------------- keys

    def _key(self, module: Any, args: tuple, kwargs: dict) -> tuple | None:
        signature = self._signature(module)
        if signature is None:
            return None
        inputs = []
        for leaf in _leaves(args, kwargs):
            if isinstance(leaf, torch.Tensor):
                if id(leaf) not in self.stand_ins.nodes:
                    return None  # a tensor the trace has not seen (a real one): trace the call
                inputs.append((tuple(leaf.shape), leaf.stride(), leaf.dtype, leaf.requires_grad))
            elif isinstance(leaf, _PLAIN):
                inputs.append(leaf)
            else:
                return None
        structure = _structure(args, kwargs)
        state = (self.stand_ins.dtype, torch.is_grad_enabled(), torch.get_default_dtype(), torch.is_autocast_enabled())
        return (signature, tuple(inputs), structure, state)

    def _signature(self, module: Any) -> tuple | None:
        """The module's structure, or None where it holds something a key cannot capture."""
        known = self.cache.signatures.get(id(module))
        if known is not None and known[0] is module:
            return known[1]
        signature = _signature(module, self._signature)
        self.cache.signatures[id(module)] = (module, signature)
        return signature

    # ----------------------------------------------------------------------------------------- templates

    def _template(self, module: Any, args: tuple, kwargs: dict, inputs: list, start: int, out: Any) -> Any:
        """The recorded call as a template, or None where a replay could not be certain to match it."""
        made = self.graph.log[start:]
        position = {node: i for i, node in enumerate(self.graph.nodes)}
        made = sorted(made, key=position.__getitem__)  # list order: unpacked elements sit after their call
        index = {node: j for j, node in enumerate(made)}
        outer = {node: k for k, node in enumerate(inputs)}
        prefix = self.paths[-1] if self.paths else ""
        tensors: dict[int, tuple] = {id(t): ("i", k) for k, t in enumerate(_input_tensors(args, kwargs))}
        ident = len(self.cache.templates)
        entries = []
        for j, node in enumerate(made):
            entry = _entry(node, (ident, j), index, outer, prefix, tensors)
            if entry is None:
                return None
            entries.append(entry)
        output = _refer(out, tensors)
        if output is _UNCERTAIN:
            return None
        return _Template(ident=ident, nodes=tuple(entries), output=output)

    def _replay(self, template: _Template, module: Any, args: tuple, kwargs: dict) -> Any:
        prefix = self.paths[-1] if self.paths else ""
        inputs = list(_input_tensors(args, kwargs))
        sources = [self.stand_ins.node_of(t) for t in inputs]
        made: list[fx.Node] = []
        values: list[Any] = []
        for entry in template.nodes:
            if entry[0] == "param":
                tensor = _named_tensor(module, entry[1])
                meta = self.stand_ins.swap(tensor)
                made.append(self.stand_ins.node_of(meta))
                values.append(meta)
                continue
            _, op, target, node_args, node_kwargs, example, suffix, memo = entry
            resolve = _resolver(made, sources)
            node = self.graph.add(
                op, target, fx.node.map_aggregate(node_args, resolve), fx.node.map_aggregate(node_kwargs, resolve)
            )
            value = _build(example, values, inputs)
            node.meta["example_value"] = value
            node.meta["nn_module_stack"] = {"m": (_join(prefix, suffix), None)}
            node.meta["reuse"] = memo
            if target is operator.getitem:
                self.stand_ins.nodes[id(value)] = node
                self.stand_ins.keep.append(value)
            else:
                self.stand_ins.produced(value, node)
            made.append(node)
            values.append(value)
        return _build(template.output, values, inputs)


# --------------------------------------------------------------------------------------------- helpers

_UNCERTAIN = object()


def _signature(module: Any, child_signature: Any) -> tuple | None:
    if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks:
        return None
    attrs = []
    for key, value in module.__dict__.items():
        if key in _MODULE_INTERNALS:
            continue
        if not _plain(value):
            return None
        attrs.append((key, _frozen(value)))
    tensors = tuple(
        (name, None if t is None else (tuple(t.shape), t.stride(), t.dtype, t.requires_grad))
        for name, t in (*module._parameters.items(), *module._buffers.items())
    )
    children = []
    for name, child in module._modules.items():
        signature = None if child is None else child_signature(child)
        if child is not None and signature is None:
            return None
        children.append((name, signature))
    return (type(module), module.training, tuple(attrs), tensors, tuple(children))


_SIMPLE = frozenset({int, float, bool, str, type(None)})


def _plain(value: Any) -> bool:
    if type(value) in _SIMPLE:
        return True
    if type(value) is tuple and all(type(v) in _SIMPLE for v in value):
        return True
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, types.BuiltinFunctionType) or (
        isinstance(value, types.FunctionType) and value.__closure__ is None
    ):
        return True  # a function without a closure does what its identity says
    if isinstance(value, (tuple, list, frozenset, torch.Size)):
        return all(_plain(v) for v in value)
    return False


def _frozen(value: Any) -> Any:
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def _leaves(args: tuple, kwargs: dict) -> list[Any]:
    out: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, (tuple, list)):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for k in sorted(value, key=str):
                walk(value[k])
        else:
            out.append(value)

    walk(args)
    walk(kwargs)
    return out


def _structure(args: tuple, kwargs: dict) -> tuple:
    """The nesting of the arguments (which containers, which keys), without their leaves."""

    def shape(value: Any) -> Any:
        if isinstance(value, (tuple, list)):
            return (type(value).__name__, tuple(shape(v) for v in value))
        if isinstance(value, dict):
            return ("dict", tuple((k, shape(value[k])) for k in sorted(value, key=str)))
        return ""

    return (shape(args), shape(kwargs))


def _input_tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return [t for t in _leaves(args, kwargs) if isinstance(t, torch.Tensor)]


def _entry(node: fx.Node, at: tuple[int, int], index: dict, outer: dict, prefix: str, tensors: dict) -> Any:
    """Node ``at`` = (template, position) of a template, or None where it reads something outside the block."""
    j = at[1]
    if node.op == "placeholder":
        name = node.meta.get("tensor_name")
        if name is None or not (name.startswith(prefix + ".") or not prefix):
            return None  # a constant, or a parameter of another module
        tensors[id(node.meta["example_value"])] = ("x", j, ())
        return ("param", name[len(prefix) + 1 :] if prefix else name)
    for source in node.all_input_nodes:
        if source not in index and source not in outer:
            return None
    path = (node.meta.get("nn_module_stack") or {"m": ("", None)})["m"][0]
    if path != prefix and not path.startswith(prefix + ".") and prefix:
        return None
    suffix = path[len(prefix) :].lstrip(".") if prefix else path
    refer = _node_ref(index, outer)
    example = _refer(node.meta["example_value"], tensors, fresh=True)
    if example is _UNCERTAIN:
        return None
    _remember(node.meta["example_value"], tensors, j, ())
    memo = node.meta.get("reuse") or at
    return (
        "node",
        node.op,
        node.target,
        fx.node.map_aggregate(node.args, refer),
        fx.node.map_aggregate(node.kwargs, refer),
        example,
        suffix,
        memo,
    )


def _node_ref(index: dict, outer: dict) -> Any:
    def refer(value: Any) -> Any:
        if isinstance(value, fx.Node):
            return _Ref("n", index[value]) if value in index else _Ref("i", outer[value])
        return value

    return refer


@dataclass(frozen=True)
class _Ref:
    kind: str  # "n": a node of the template, "i": the producer of the block's k-th input tensor
    at: int


def _resolver(made: list, sources: list) -> Any:
    def resolve(value: Any) -> Any:
        if isinstance(value, _Ref):
            return made[value.at] if value.kind == "n" else sources[value.at]
        return value

    return resolve


def _refer(value: Any, tensors: dict, fresh: bool = False) -> Any:
    """A value as a template: each tensor an alias of one seen before (an input, an earlier node's output) or,
    where ``fresh``, a new tensor's (shape, stride, dtype, requires_grad)."""
    if isinstance(value, torch.Tensor):
        seen = tensors.get(id(value))
        if seen is not None:
            return ("alias", seen)
        if not fresh:
            return _UNCERTAIN
        return ("new", tuple(value.shape), value.stride(), value.dtype, value.requires_grad)
    if isinstance(value, (tuple, list)):
        items = [_refer(v, tensors, fresh) for v in value]
        return _UNCERTAIN if any(i is _UNCERTAIN for i in items) else (type(value).__name__, tuple(items))
    if isinstance(value, dict):
        items = {k: _refer(v, tensors, fresh) for k, v in value.items()}
        return _UNCERTAIN if any(i is _UNCERTAIN for i in items.values()) else ("dict", items)
    return ("plain", value) if _plain(value) else _UNCERTAIN


def _remember(value: Any, tensors: dict, j: int, path: tuple) -> None:
    """Note where each tensor of node ``j``'s output sits, so later nodes and the result can alias it."""
    if isinstance(value, torch.Tensor):
        tensors.setdefault(id(value), ("x", j, path))
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            _remember(v, tensors, j, (*path, i))


def _build(template: Any, values: list, inputs: list) -> Any:
    kind = template[0]
    if kind == "new":
        _, shape, stride, dtype, requires_grad = template
        tensor = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        return tensor.requires_grad_(True) if requires_grad else tensor
    if kind == "alias":
        where = template[1]
        if where[0] == "i":
            return inputs[where[1]]
        value = values[where[1]]
        for i in where[2]:
            value = value[i]
        return value
    if kind in ("tuple", "list"):
        items = [_build(t, values, inputs) for t in template[1]]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {k: _build(t, values, inputs) for k, t in template[1].items()}
    return template[1]  # plain


def _named_tensor(module: Any, name: str) -> torch.Tensor:
    """A parameter or buffer by its dotted name under ``module`` (read from the module dicts: nn.Module's
    attribute lookup raises and catches on every miss, which a replay pays thousands of times)."""
    *owners, leaf = name.split(".")
    for part in owners:
        module = module._modules[part]
    found = module._parameters.get(leaf)
    return found if found is not None else module._buffers[leaf]


def _join(prefix: str, suffix: str) -> str:
    return f"{prefix}.{suffix}" if prefix and suffix else prefix or suffix
