"""TVM Relax IRModule -> OpGraph.

A :class:`tvm.relax.PyExprVisitor` walks every binding of the module's entry function: for each call it reads
the op name (``relax.nn.conv2d``), its typed attributes (strides, layouts, axes) and the shapes and dtypes of
arguments and result from their type (``expr.ty`` in apache-tvm 0.27, ``struct_info`` before). The calls are
then canonicalised and costed by the builder shared with the ONNX frontend (see ``dataflow_builder.py``).

Symbolic dimensions (``R.Tensor(("n", 768))``) are resolved, in order, from ``shape_hints={"n": 128}``, then
from the function's ``tir_var_upper_bound`` attribute (a bound predicts the worst case), and otherwise predicted
at 1 with a warning naming the dimension. Every resolution is written into the graph's notes.

Only Relax exists in apache-tvm 0.25+: Relay, the IR older TVM releases (and the research this package follows)
used, was removed, so there is no Relay frontend.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

from perfpredict.compiler_hooks.dataflow_builder import DataflowBuilder, RawOp
from perfpredict.compiler_hooks.op_names import RELAX_IGNORED, RELAX_NAMES
from perfpredict.core import ops
from perfpredict.core.errors import FrontendError
from perfpredict.core.graph import OpGraph, TensorMeta

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

# Ops that a TVM build introduces during and after legalisation: a module made of these has no Relax op left.
LOWERED_CALLS = {
    "relax.call_tir",
    "relax.call_tir_inplace",
    "relax.call_tir_with_grad",
    "relax.call_dps_packed",
    "relax.call_pure_packed",
    "relax.vm.alloc_storage",
    "relax.vm.alloc_tensor",
    "relax.memory.alloc_storage",
    "relax.memory.alloc_tensor",
    "relax.builtin.alloc_tensor",
    "relax.vm.call_tir_dyn",
}


def _type_of(expr: Any) -> Any:
    """The Relax type of an expression: ``ty`` (apache-tvm 0.27) or ``struct_info`` (0.25-0.26)."""
    for attr in ("ty", "struct_info_", "struct_info"):
        try:
            value = getattr(expr, attr, None)
        except Exception:  # noqa: BLE001 - struct_info raises on exprs that have none yet
            value = None
        if value is not None:
            return value
    return None


class _Dims:
    """Turns shape entries (IntImm or symbolic PrimExpr) into ints, recording how each symbol was resolved."""

    def __init__(self, hints: Mapping[str, int], bounds: Mapping[str, int]):
        self.hints = {str(k): int(v) for k, v in hints.items()}
        self.bounds = {str(k): int(v) for k, v in bounds.items()}
        self.used: dict[str, tuple[int, str]] = {}

    def value(self, expr: Any) -> int:
        if isinstance(expr, int):
            return expr
        name = type(expr).__name__
        if name == "IntImm" or (hasattr(expr, "value") and not hasattr(expr, "a") and name != "Var"):
            return int(expr.value)
        if name in ("Var", "SizeVar"):
            return self._symbol(str(expr.name))
        a, b = getattr(expr, "a", None), getattr(expr, "b", None)
        if a is not None and b is not None:
            x, y = self.value(a), self.value(b)
            table = {
                "Add": x + y,
                "Sub": x - y,
                "Mul": x * y,
                "FloorDiv": x // y if y else 0,
                "Div": x // y if y else 0,
                "FloorMod": x % y if y else 0,
                "Mod": x % y if y else 0,
                "Max": max(x, y),
                "Min": min(x, y),
            }
            if name in table:
                return table[name]
        raise FrontendError(f"cannot evaluate the shape expression {str(expr)!r}; pass shape_hints for its symbols")

    def _symbol(self, name: str) -> int:
        if name in self.hints:
            self.used[name] = (self.hints[name], "shape_hints")
        elif name in self.bounds:
            self.used[name] = (self.bounds[name], "tir_var_upper_bound")
        else:
            self.used[name] = (1, "default")
        return self.used[name][0]

    def notes(self) -> list[str]:
        out = []
        for name, (value, how) in sorted(self.used.items()):
            if how == "shape_hints":
                out.append(f"symbolic dimension {name!r} predicted at {value} (shape_hints)")
            elif how == "tir_var_upper_bound":
                out.append(
                    f"symbolic dimension {name!r} predicted at its upper bound {value} (worst case); "
                    f"pass shape_hints={{{name!r}: ...}} for another size"
                )
            else:
                out.append(
                    f"symbolic dimension {name!r} has no bound or hint and was predicted at 1; "
                    f"pass shape_hints={{{name!r}: ...}}"
                )
        return out


def graph_from_relax(
    mod: Any,
    *,
    func_name: str | None = None,
    shape_hints: Mapping[str, int] | None = None,
    phase: str = "inference",
    name: str = "",
    fuse: bool = True,
) -> OpGraph:
    """Turn a Relax IRModule (or one of its functions) into an OpGraph.

    ``func_name`` picks the entry function (default ``"main"``, else the only Relax function). ``shape_hints``
    maps symbolic dimension names to the sizes to predict at.
    """
    from tvm import relax

    func = _entry(mod, func_name)
    bounds = {}
    attrs = getattr(func, "attrs", None)
    if attrs is not None and "tir_var_upper_bound" in attrs:
        bounds = {str(k): int(v) for k, v in dict(attrs["tir_var_upper_bound"]).items()}
    dims = _Dims(shape_hints or {}, bounds)
    builder = DataflowBuilder(source="relax")
    walker = _make_walker(relax)(builder, dims)
    for p in func.params:
        metas = walker.metas_of(p)
        for i, m in enumerate(metas):
            builder.add_tensor((p, i) if len(metas) > 1 else p, m)
            builder.graph_inputs.append((p, i) if len(metas) > 1 else p)
    num_input = attrs.get("num_input") if attrs is not None and "num_input" in attrs else None
    if num_input is not None:  # keep_params_as_input=True: the trailing parameters are weights
        for p in list(func.params)[int(num_input) :]:
            builder.graph_inputs.remove(p)
            builder.add_param(p, builder.tensors[p])
    walker.visit_expr(func)
    builder.graph_outputs.extend(walker.resolve(func.body.body) if hasattr(func.body, "body") else [])
    lowered = walker.lowered
    if lowered and lowered >= max(1, walker.calls) * 0.5:
        builder.notes.append(
            f"relax: {lowered} of {walker.calls} calls are call_tir/packed calls: this module has already been "
            "legalised (LegalizeOps), so op names and costs are lost; run PredictPerformance before LegalizeOps"
        )
    notes = dims.notes()
    unresolved = [n for n, (_, how) in dims.used.items() if how == "default"]
    if unresolved:
        warnings.warn(
            f"perfpredict: symbolic dimension(s) {unresolved!r} have no bound or hint and were predicted "
            f"at 1; pass shape_hints={{{unresolved[0]!r}: ...}}",
            stacklevel=3,
        )
    return builder.build(name=name, phase=phase, notes=notes, fuse=fuse)


def count_lowered_calls(mod: Any, func_name: str | None = None) -> tuple[int, int]:
    """(call_tir-style calls, all calls) of the entry function: tells a legalised module from a high-level one."""
    from tvm import relax

    func = _entry(mod, func_name)
    walker = _make_walker(relax)(DataflowBuilder(source="relax"), _Dims({}, {}))
    walker.visit_expr(func)
    return walker.lowered, walker.calls


def _entry(mod: Any, func_name: str | None) -> Any:
    from tvm import relax

    if isinstance(mod, relax.Function):
        return mod
    funcs = {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, relax.Function)}
    if func_name is not None:
        if func_name not in funcs:
            raise FrontendError(f"the module has no Relax function {func_name!r}; it has {sorted(funcs)!r}")
        return funcs[func_name]
    if "main" in funcs:
        return funcs["main"]
    if len(funcs) == 1:
        return next(iter(funcs.values()))
    raise FrontendError(f"the module has no 'main' and several Relax functions {sorted(funcs)!r}; pass func_name=...")


def _make_walker(relax: Any) -> type:
    """The PyExprVisitor subclass (built lazily so that importing this module does not import tvm)."""
    if hasattr(_make_walker, "cls"):
        return _make_walker.cls

    @relax.expr_functor.visitor
    class _Walker(relax.PyExprVisitor):
        def __init__(self, builder: DataflowBuilder, dims: _Dims) -> None:
            super().__init__()
            self.builder = builder
            self.dims = dims
            self.alias: dict[Any, list[Any]] = {}  # var -> the tensor ids it stands for
            self.calls = 0
            self.lowered = 0
            self.counter = 0

        # -- types -> TensorMeta
        def metas_of(self, expr: Any) -> list[TensorMeta]:
            return self._metas(_type_of(expr))

        def _metas(self, ty: Any) -> list[TensorMeta]:
            if ty is None:
                return []
            fields = getattr(ty, "fields", None)
            if fields is not None:
                return [m for f in fields for m in self._metas(f)]
            dtype = getattr(ty, "dtype", None)
            shape = getattr(ty, "shape", None)
            if dtype is None or shape is None or not hasattr(ty, "ndim"):
                return []
            values = getattr(shape, "values", None)
            if values is None:
                return []
            dims = tuple(self.dims.value(v) for v in values)
            return [TensorMeta(dims, _dtype(str(dtype)))]

        # -- expressions -> tensor ids
        def resolve(self, expr: Any) -> list[Any]:
            kind = type(expr).__name__
            if kind in ("Var", "DataflowVar"):
                return self.alias.get(expr, [expr])
            if kind == "Tuple":
                return [t for f in expr.fields for t in self.resolve(f)]
            if kind == "TupleGetItem":
                parts = self.resolve(expr.tuple_value)
                return [parts[int(expr.index)]] if int(expr.index) < len(parts) else []
            if kind in ("Constant", "GenericConst"):
                metas = self.metas_of(expr)
                if metas:
                    self.builder.add_param(expr, metas[0])
                    return [expr]
            return []

        def visit_var_binding_(self, binding: Any) -> None:
            self._bind(binding.var, binding.value)

        def visit_match_cast_(self, binding: Any) -> None:
            self._bind(binding.var, binding.value)

        def _bind(self, var: Any, value: Any) -> None:
            if type(value).__name__ != "Call":
                ids = self.resolve(value)
                self.alias[var] = ids
                if type(value).__name__ in ("If", "SeqExpr", "Function"):
                    self.visit_expr(value)
                return
            self._call(var, value)

        def _call(self, var: Any, call: Any) -> None:
            op = call.op
            op_name = str(getattr(op, "name", "")) if type(op).__name__ == "Op" else ""
            self.calls += 1
            if not op_name:  # a call to a GlobalVar (PrimFunc or another Relax function) or an extern
                target = str(getattr(op, "name_hint", getattr(op, "global_symbol", type(op).__name__)))
                self.lowered += 1
                self._record(var, call, f"call {target}", "unknown", list(call.args), {})
                return
            short = op_name[len("relax.") :] if op_name.startswith("relax.") else op_name
            if short in RELAX_IGNORED:
                self.calls -= 1
                self.alias[var] = []
                return
            args = list(call.args)
            if op_name in LOWERED_CALLS:
                self.lowered += 1
                callee = args[0] if args else None
                target = str(getattr(callee, "name_hint", op_name))
                tensor_args = args[1] if len(args) > 1 else None
                self._record(
                    var, call, f"{op_name}({target})", "unknown", [tensor_args] if tensor_args is not None else [], {}
                )
                return
            bare = RELAX_NAMES.get(short, short.split(".")[-1])
            attrs = _attrs(call.attrs)
            self._record(var, call, op_name, bare, args, attrs)

        def _record(self, var: Any, call: Any, target: str, bare: str, args: list, attrs: dict) -> None:
            inputs: list[Any] = []
            for a in args:
                inputs.extend(t for t in self.resolve(a) if t not in inputs)
            metas = self.metas_of(var)
            outputs = [(var, i) for i in range(len(metas))] if len(metas) > 1 else ([var] if metas else [])
            for t, m in zip(outputs, metas):
                self.builder.add_tensor(t, m)
            self.alias[var] = outputs
            if not outputs:
                return  # shape or void results: nothing to run
            self.counter += 1
            op = RawOp(
                name=_var_name(var, self.counter), target=target, bare=bare, inputs=inputs, outputs=outputs, attrs=attrs
            )
            self._refine(op)
            self.builder.add_op(op)

        def _refine(self, op: RawOp) -> None:
            """Relax spellings whose cost class depends on operands: embeddings, scalar-free casts."""
            b = self.builder
            if op.bare == "index_select" and op.inputs:
                table = b.tensors.get(op.inputs[0])
                if (
                    op.inputs[0] in b.params
                    and table is not None
                    and len(table.shape) == 2
                    and op.attrs.get("axis", 0) in (0, None)
                ):
                    op.bare = "embedding"
            if (
                op.bare == "to"
                and op.inputs
                and op.inputs[0] in b.tensors
                and op.outputs
                and b.tensors[op.inputs[0]].dtype == b.tensors[op.outputs[0]].dtype
            ):
                op.bare = "identity"
            if "pool_size" in op.attrs and not op.bare.startswith("adaptive"):
                op.attrs["kernel"] = list(op.attrs["pool_size"])
            if op.bare == "unknown":
                op.attrs["_kind"] = ops.UNKNOWN

    _make_walker.cls = _Walker
    return _Walker


def _var_name(var: Any, counter: int) -> str:
    for attr in ("name_hint", "name"):
        value = getattr(var, attr, None)
        if isinstance(value, str) or (value is not None and not callable(value)):
            return str(value)
    return f"op{counter}"


def _attrs(attrs: Any) -> dict[str, Any]:
    """Typed call attributes (Conv2DAttrs, ...) as a dict of plain values."""
    if attrs is None:
        return {}
    keys: list[str] = []
    try:
        keys = list(attrs.keys())
    except Exception:  # noqa: BLE001 - tvm-ffi attrs objects list their fields differently
        keys = [
            k
            for k in dir(attrs)
            if not k.startswith("_")
            and k
            not in (
                "get_int",
                "get_int_tuple",
                "get_str",
                "id_",
                "is_",
                "same_as",
                "keys",
                "list_field_info",
                "script",
                "show",
                "handle",
            )
        ]
    out: dict[str, Any] = {}
    for k in keys:
        try:
            v = getattr(attrs, k)
        except Exception:  # noqa: BLE001
            continue
        if callable(v):
            continue
        out[k] = _plain(v)
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if hasattr(v, "value") and isinstance(v.value, (int, float, str, bool)):
        return v.value
    try:
        return [_plain(x) for x in v]
    except TypeError:
        return str(v)


def _dtype(name: str) -> str:
    return {
        "float": "float32",
        "int": "int32",
        "bool": "bool",
        "e4m3_float8": "float8_e4m3fn",
        "e5m2_float8": "float8_e5m2",
        "float8_e4m3fn": "float8_e4m3fn",
    }.get(name, name)
