"""Capture a model's forward without running it: every tensor it touches becomes a meta stand-in.

A ``TorchFunctionMode`` sees each torch-level call the forward makes (``conv2d``, ``batch_norm``, ``x.view``,
``x + y``) with its arguments. It swaps every real tensor among them (the inputs, the weights and buffers, a tensor
the model keeps as a plain attribute) for a meta tensor of the same shape and strides, in the run dtype where the
caller asks for one, runs the call on those (shapes only: no arithmetic, no memory), and records it as a node of a
torch.fx graph like the one dynamo builds, which :func:`perfpredict.compiler_hooks.fx_frontend.graph_from_fx` turns
into the OpGraph. The caller's model, inputs and RNG are never written: in-place updates such as BatchNorm's running
statistics land on the stand-ins, factories inside the forward are made on the meta device, and device moves
(``x.to("cuda")``) keep a stand-in where it is.

A forward that needs a tensor's values (``.item()``, ``.tolist()``, ``if (x > 0).any():``) cannot run on meta
tensors, nor can a custom op without a meta kernel; :class:`MetaCaptureError` names the op and the module.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.fx as fx
from torch.overrides import TorchFunctionMode

from perfpredict.compiler_hooks import block_reuse, checkpoint_regions, op_table, shape_rules
from perfpredict.core.errors import FrontendError

# torch functions that create a tensor and take a ``device=``: made on the meta device wherever the forward asks for
# them. op_table's creation kind also holds bernoulli and dropout masks, which take no device; the four added here
# have no cost kind yet (op_table classifies them unknown).
_FACTORIES = op_table.FACTORIES | {"range", "tril_indices", "triu_indices", "randint_like"}
_FROM_DATA = frozenset({"tensor", "as_tensor", "scalar_tensor", "new_tensor"})
# tensor methods that move to a device: the stand-in stays on meta, the node is still recorded
_MOVES = frozenset({"to", "cuda", "cpu", "type"})
# calls whose answer is a Python value read from the tensor's data
_VALUE_READS = frozenset({"item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero"})


class MetaCaptureError(FrontendError):
    """The forward cannot run on meta tensors: it reads a tensor's values, or calls an op without a meta kernel."""


class TracedGraph:
    """The recorded nodes, in the shape ``graph_from_fx`` reads (``traced.graph.nodes``).

    The nodes are ``fx.Node`` objects made directly and kept in a list: ``fx.Graph.create_node`` spends 20 times
    what the node costs on naming it, and nothing here needs the graph's code generation.
    """

    def __init__(self) -> None:
        self.owner = fx.Graph()  # every fx.Node names a graph; this one only owns them
        self.nodes: list[fx.Node] = []
        self.log: list[fx.Node] = []  # the nodes in the order they were made (block_reuse reads a call's share)

    @property
    def graph(self) -> TracedGraph:
        return self

    def add(
        self, op: str, target: Any, args: tuple = (), kwargs: dict | None = None, name: str = "", after: Any = None
    ) -> fx.Node:
        """A new node, last, or (an element of the multi-output call ``after``) right after that call and the
        elements before it, where dynamo's unpacking puts it."""
        label = name or (target if isinstance(target, str) else getattr(target, "__name__", "op"))
        node = fx.Node(self.owner, f"{label}_{len(self.nodes)}", op, target, args, kwargs or {})
        self.log.append(node)
        if after is None:
            self.nodes.append(node)
            return node
        at = len(self.nodes) - 1
        while self.nodes[at] is not after:
            at -= 1
        at += 1
        while at < len(self.nodes) and _item_before(self.nodes[at], after, args[1]):
            at += 1
        self.nodes.insert(at, node)
        return node


class _Recorder(TorchFunctionMode):
    """Runs each torch call on meta stand-ins and appends it to ``graph``."""

    def __init__(
        self, graph: TracedGraph, stand_ins: _StandIns, paths: list[str], regions: list[int] | None = None
    ) -> None:
        super().__init__()
        self.graph = graph
        self.stand_ins = stand_ins
        self.paths = paths  # the stack of module paths whose forward is running (the innermost last)
        self.regions = regions if regions is not None else []  # the torch.utils.checkpoint calls running

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: Mapping | None = None) -> Any:
        name = getattr(func, "__name__", "")
        meta_args = self.stand_ins.swap(args)
        meta_kwargs = self.stand_ins.swap(kwargs) if kwargs else {}
        if name == "__get__":  # a property (x.shape, w.dtype): the stand-in's, so the forward sees the run dtype
            return func(*meta_args, **meta_kwargs)
        if name in _VALUE_READS:
            raise MetaCaptureError(self._reads_values(name))
        if name in _MOVES and meta_args and isinstance(meta_args[0], torch.Tensor):
            func, name, meta_args, meta_kwargs = _move(meta_args[0], name, meta_args[1:], meta_kwargs)
        elif name in _FACTORIES:
            meta_kwargs = {**meta_kwargs, "device": "meta"}
        out = self._run(func, name, meta_args, meta_kwargs)
        if name in _FROM_DATA and isinstance(out, torch.Tensor):
            # a tensor made from Python data, recorded as the zeros of its shape: the data is never read, and a
            # replay under fake tensors (AOTAutograd) cannot lift meta data
            func, name, meta_args, meta_kwargs = torch.zeros, "zeros", (tuple(out.shape),), _like_kwargs(out)
        if shape_rules.has_tensor(out):
            self._record(func, name, meta_args, meta_kwargs, out)
        return out

    def _run(self, func: Callable, name: str, args: tuple, kwargs: dict) -> Any:
        fast = shape_rules.output_of(func, name, args, kwargs)
        if fast is not shape_rules.NO_RULE:
            return fast
        try:
            return func(*args, **kwargs)
        except (NotImplementedError, RuntimeError) as err:
            text = str(err)
            if "data-dependent" in text.lower() or "cannot be called on meta tensors" in text:
                raise MetaCaptureError(self._reads_values(name)) from err
            if "fake impl" in text or ("Meta" in text and ("backend" in text or "kernel" in text)):
                raise MetaCaptureError(
                    f"{name}() in {self._module()!r} has no meta kernel, so it cannot run on meta tensors; register "
                    "one (torch.library.register_fake) or pass capture='real' to run the model once on real inputs"
                ) from err
            raise

    def _record(self, func: Callable, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        node_args = fx.node.map_aggregate(args, self.stand_ins.node_of)
        node_kwargs = fx.node.map_aggregate(kwargs, self.stand_ins.node_of)
        if _is_method(func):
            node = self.graph.add("call_method", name, node_args, node_kwargs)
        else:
            node = self.graph.add("call_function", func, node_args, node_kwargs, name)
        node.meta["example_value"] = out
        if self.paths:
            node.meta["nn_module_stack"] = {"m": (self.paths[-1], None)}
        if self.regions:  # tagged as dynamo tags a checkpointed region; AOTAutograd copies the tags to the joint graph
            node.meta["recompute"] = checkpoint_regions.PREFER_RECOMPUTE()
            node.meta["ac_graph_id"] = self.regions[-1]
        self.stand_ins.produced(out, node)

    def _module(self) -> str:
        return self.paths[-1] if self.paths else "the model's forward"

    def _reads_values(self, name: str) -> str:
        return (
            f"{name}() in {self._module()!r} reads a tensor's values, which a capture on meta tensors does not "
            "have; make the branch depend on shapes only, or pass capture='real' to run the model once on real "
            "inputs (its arithmetic runs on the CPU: keep the batch small)"
        )


class _StandIns:
    """Meta stand-ins for real tensors, and the fx node that last wrote each tensor the trace has seen."""

    def __init__(self, graph: TracedGraph, names: dict[int, tuple[str, bool]], dtype: torch.dtype | None) -> None:
        self.graph = graph
        self.names = names  # id(real tensor) -> (parameter or buffer name, is a parameter)
        self.dtype = dtype
        self.meta: dict[int, torch.Tensor] = {}  # id(real) -> its stand-in
        self.nodes: dict[int, fx.Node] = {}  # id(meta tensor) -> the node that produced it
        self.keep: list[Any] = []  # every tensor seen stays alive, so no id is reused within one trace

    def input(self, value: torch.Tensor, label: str) -> torch.Tensor:
        meta = self._stand_in(value)
        self._placeholder(meta, label)
        return meta

    def swap(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value if value.is_meta and id(value) in self.nodes else self._stand_in(value)
        if isinstance(value, (tuple, list)):
            out = [self.swap(v) for v in value]
            return tuple(out) if isinstance(value, tuple) else out
        if isinstance(value, dict):
            return {k: self.swap(v) for k, v in value.items()}
        return value

    def node_of(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        node = self.nodes.get(id(value))
        if node is None:
            return self._placeholder(value, "constant")
        if isinstance(node, tuple):  # one element of a multi-output call, indexed on first use as dynamo does
            source, path = node
            for i in path:
                item = self.graph.add("call_function", operator.getitem, (source, i), name="getitem", after=source)
                item.meta["example_value"] = source.meta["example_value"][i]
                if "nn_module_stack" in source.meta:
                    item.meta["nn_module_stack"] = source.meta["nn_module_stack"]
                source = item
            self.nodes[id(value)] = node = source
        return node

    def produced(self, out: Any, node: fx.Node) -> None:
        if isinstance(out, torch.Tensor):
            self.nodes[id(out)] = node
            self.keep.append(out)
            return
        for path, t in _indexed(out, ()):
            self.nodes[id(t)] = (node, path)
            self.keep.append(t)

    def _stand_in(self, value: torch.Tensor) -> torch.Tensor:
        if value.is_meta and id(value) in self.nodes:
            return value
        meta = self.meta.get(id(value))
        if meta is None:
            dtype = self.dtype if self.dtype is not None and value.is_floating_point() else value.dtype
            meta = torch.empty_strided(value.shape, value.stride(), dtype=dtype, device="meta")
            if value.requires_grad and meta.is_floating_point():
                meta.requires_grad_(True)
            self.meta[id(value)] = meta
            self.keep.extend((value, meta))
            named = self.names.get(id(value))
            if named is not None:
                self._placeholder(meta, named[0], parameter=named[1])
        return meta

    def _placeholder(self, meta: torch.Tensor, label: str, parameter: bool | None = None) -> fx.Node:
        """A graph input; parameters and buffers are named as dynamo names them, which is how fx_frontend tells
        them from the user's inputs."""
        kind = {True: "_parameters_", False: "_buffers_", None: "_"}[parameter]
        name = f"L_self_{label.replace('.', '_')}{kind}{len(self.graph.nodes)}"  # a Python identifier
        node = self.graph.add("placeholder", name, name=name)
        node.meta["example_value"] = meta
        if parameter is not None:
            node.meta["tensor_name"] = label
        self.nodes[id(meta)] = node
        self.keep.append(meta)
        return node


#: a wrapper module that only calls the model it holds (generation's prefill and decode step) names that attribute
#: here, so that module paths and tensor names are the model's own: "model.layers.0", not "m.model.layers.0"
WRAPS = "perfpredict_wraps"


def named_modules(model: Any) -> list[tuple[str, Any]]:
    """``model.named_modules()``, with a wrapper's attribute (``WRAPS``) left out of every name."""
    modules = list(model.named_modules()) if isinstance(model, torch.nn.Module) else []
    inner = getattr(model, WRAPS, "")
    return [(unwrapped(name, inner), m) for name, m in modules] if inner else modules


def unwrapped(path: str, inner: str) -> str:
    """``path`` without the wrapper's attribute ``inner`` in front ("m.model.norm" -> "model.norm")."""
    return "" if path == inner else path.removeprefix(f"{inner}.") if inner else path


def trace(
    model: Callable,
    args: tuple,
    kwargs: Mapping[str, Any],
    *,
    dtype: torch.dtype | None = None,
    grad: bool = False,
    blocks: Any = None,
) -> TracedGraph:
    """The fx nodes of ``model(*args, **kwargs)`` run on meta stand-ins (see the module's docstring), with autograd
    on where ``grad`` (a training step's forward). ``blocks`` (a ``block_reuse.BlockCache``) replays the calls of
    blocks an earlier trace recorded."""
    graph = TracedGraph()
    modules = named_modules(model)
    stand_ins = _StandIns(graph, _tensor_names(modules), dtype)
    meta_args = tuple(_input(stand_ins, a, f"arg{i}") for i, a in enumerate(args))
    meta_kwargs = {k: _input(stand_ins, v, k) for k, v in kwargs.items()}
    paths: list[str] = []
    regions: list[int] = []
    reuse = (
        block_reuse.Reuse(modules, blocks, graph, stand_ins, paths)
        if blocks is not None and modules
        else contextlib.nullcontext()
    )
    with (
        _compiling(),
        _ModulePaths(modules, paths),
        reuse,
        checkpoint_regions.recorded(regions),
        _Recorder(graph, stand_ins, paths, regions),
        torch.set_grad_enabled(grad),
    ):
        out = model(*meta_args, **meta_kwargs)
    results = tuple(stand_ins.node_of(t) for t in shape_rules.tensors(out) if id(t) in stand_ins.nodes)
    graph.add("output", "output", (results,))
    return graph


def to_graph_module(traced: TracedGraph) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """The recorded forward as a runnable GraphModule (graph inputs first) and its example inputs (the stand-ins):
    what a torch.compile backend receives, so AOTAutograd can trace the backward from it."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    ordered = sorted(traced.nodes, key=lambda n: n.op != "placeholder")  # stable: inputs first, the rest in order
    for node in ordered:
        env[node] = graph.node_copy(node, lambda n: env[n])
        env[node].meta = node.meta
    inputs = [n.meta["example_value"] for n in ordered if n.op == "placeholder"]
    return fx.GraphModule(torch.nn.Module(), graph), inputs


def _item_before(node: fx.Node, source: fx.Node, index: int) -> bool:
    """Whether ``node`` unpacks an earlier element of ``source`` (elements stand in index order, as unpacked)."""
    return node.target is operator.getitem and node.args[0] is source and node.args[1] < index


def _indexed(value: Any, path: tuple) -> Iterator[tuple[tuple, torch.Tensor]]:
    """(index path, tensor) for each tensor in nested tuples and lists."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from _indexed(v, (*path, i))


def _compiling() -> Any:
    """torch.compiler.is_compiling() is True during a trace, as under torch.compile and make_fx: a model's checks
    that read values outside a compile (transformers' "is the mask all ones?") take the branch dynamo's graph has."""
    return getattr(torch.compiler, "_compile_session_context", contextlib.nullcontext)()


def _input(stand_ins: _StandIns, value: Any, label: str) -> Any:
    """The user's inputs: tensors (also inside tuples, lists and dicts) become stand-ins and graph inputs."""
    if isinstance(value, torch.Tensor):
        return stand_ins.input(value, label)
    if isinstance(value, (tuple, list)):
        out = [_input(stand_ins, v, f"{label}_{i}") for i, v in enumerate(value)]
        return tuple(out) if isinstance(value, tuple) else out
    if isinstance(value, dict):
        return {k: _input(stand_ins, v, f"{label}_{k}") for k, v in value.items()}
    return value


def _tensor_names(modules: list[tuple[str, Any]]) -> dict[int, tuple[str, bool]]:
    """id(parameter or buffer) -> (its dotted name, whether it is a parameter); the first name of a shared one."""
    names: dict[int, tuple[str, bool]] = {}
    for prefix, module in modules:
        for table, is_param in ((module._buffers, False), (module._parameters, True)):
            for leaf, tensor in table.items():
                if tensor is not None and id(tensor) not in names:
                    names[id(tensor)] = (f"{prefix}.{leaf}" if prefix else leaf, is_param)
    return names


class _ModulePaths:
    """Keeps ``paths`` as the stack of running module forwards, by global hooks that live only during a trace."""

    def __init__(self, modules: list[tuple[str, Any]], paths: list[str]) -> None:
        self.names = {id(m): n for n, m in modules}
        self.paths = paths
        self.handles: list[Any] = []

    def __enter__(self) -> None:
        from torch.nn.modules import module

        def enter(mod: Any, _args: Any) -> None:
            self.paths.append(self.names.get(id(mod), self.paths[-1] if self.paths else ""))

        def leave(mod: Any, _args: Any, _out: Any) -> None:
            if self.paths:
                self.paths.pop()

        self.handles = [
            module.register_module_forward_pre_hook(enter),
            module.register_module_forward_hook(leave, always_call=True),
        ]

    def __exit__(self, *exc: Any) -> None:
        for handle in self.handles:
            handle.remove()


def _move(tensor: torch.Tensor, name: str, args: tuple, kwargs: Mapping) -> tuple[Callable, str, tuple, dict]:
    """``x.to(...)``, ``x.cuda()``, ``x.cpu()``, ``x.type(...)`` on a stand-in, as the call to run and record: a
    dtype change stays, a device move does not (the stand-in stays on meta, and the node reads as a free view)."""
    dtype = kwargs.get("dtype")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, torch.Tensor):
            dtype = a.dtype
        elif isinstance(a, str) and name == "type":
            dtype = _TYPE_NAMES.get(a.split(".")[-1])
    if dtype is None or dtype == tensor.dtype:
        return torch.Tensor.to, "to", (tensor,), {}
    return torch.Tensor.to, "to", (tensor,), {"dtype": dtype}


def _like_kwargs(tensor: torch.Tensor) -> dict:
    return {"dtype": tensor.dtype, "device": "meta"}


# x.type("torch.HalfTensor") and friends: the dtype the name stands for
_TYPE_NAMES = {
    "FloatTensor": torch.float32,
    "DoubleTensor": torch.float64,
    "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16,
    "LongTensor": torch.int64,
    "IntTensor": torch.int32,
    "BoolTensor": torch.bool,
}


def _is_method(func: Callable) -> bool:
    """Tensor methods are recorded as dynamo records them: ``call_method`` with the method's name."""
    return getattr(func, "__objclass__", None) in (torch.Tensor, torch._C.TensorBase) or (
        getattr(func, "__qualname__", "").startswith(("Tensor.", "TensorBase."))
    )
