"""The dataflow builder shared by the ONNX and the TVM Relax frontends (their op names: :mod:`.op_names`).

Both IRs are lower level than a dynamo graph: a ``torch.nn.Linear`` arrives as ``MatMul`` + ``Add`` (or
``permute_dims`` + ``matmul`` + ``add``), and ``scaled_dot_product_attention`` as a chain of matmul, scale, mask,
softmax and matmul. So that every frontend predicts the same model the same way, :class:`DataflowBuilder`
canonicalises such patterns back to the ops the FX frontend sees before it builds the :class:`OpGraph`:

- a matmul or convolution followed by an ``add`` of a constant bias becomes one node (as ``linear``/``addmm``);
- a ``matmul -> [scale, mask, safe-softmax guards] -> softmax -> matmul`` region becomes one ``attention`` node;
- ops whose inputs are all constants (shape arithmetic, ``permute_dims(weight)``) are folded away, as TVM's
  ``FoldConstant`` and ONNX Runtime's constant folding do;
- views (reshape, transpose, slice, expand) cost nothing, as in the FX frontend.

The bytes model is the op kinds' byte rules (:mod:`perfpredict.core.op_kinds.builtin`), written out in
``_node`` for ONNX and Relax operands: every input read once and every output written once per op; an embedding
lookup reads only the rows it gathers (its indices are the second operand here, where the FX rule takes the
integer one). Each frontend maps its own op names to a *bare* (torch-style) name here,
classifies it with :func:`perfpredict.compiler_hooks.op_table.classify` and counts FLOPs with its kind's rule (:mod:`perfpredict.core.op_kinds`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from perfpredict.compiler_hooks import op_table
from perfpredict.core import op_kinds, ops
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta
from perfpredict.core.op_kinds import elementwise_costs

Meta = TensorMeta


@dataclass
class RawOp:
    """One frontend op before canonicalisation. ``inputs``/``outputs`` are tensor ids of the builder."""

    name: str
    target: str
    bare: str
    inputs: list[Any]
    outputs: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    flops: int | None = None  # None: count with the shared rules from the bare name
    module_path: str = ""

    @property
    def kind(self) -> str:
        return self.attrs.get("_kind") or op_table.classify(self.bare)


@dataclass
class DataflowBuilder:
    """Collects tensors and ops in execution order, canonicalises them and builds the OpGraph."""

    source: str
    tensors: dict[Any, TensorMeta] = field(default_factory=dict)
    params: dict[Any, TensorMeta] = field(default_factory=dict)  # constants and weights, counted once each
    graph_inputs: list[Any] = field(default_factory=list)
    graph_outputs: list[Any] = field(default_factory=list)
    ops: list[RawOp] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    folded: int = 0
    fused_bias: int = 0
    fused_attention: int = 0

    # -- collection -------------------------------------------------------------------------------------------
    def add_tensor(self, tid: Any, meta: TensorMeta | None) -> None:
        if meta is not None:
            self.tensors[tid] = meta

    def add_param(self, tid: Any, meta: TensorMeta) -> None:
        self.tensors[tid] = meta
        self.params[tid] = meta

    def add_op(self, op: RawOp) -> None:
        self.ops.append(op)

    # -- canonicalisation -------------------------------------------------------------------------------------
    def _fold_constants(self) -> None:
        """Drop ops whose every input is a constant (or that have no tensor input but are not creation ops)."""
        const = set(self.params)
        self._stored: dict[Any, TensorMeta] = {}
        kept: list[RawOp] = []
        for op in self.ops:
            tensor_inputs = [t for t in op.inputs if t in self.tensors]
            scalar = all(self.tensors[t].numel <= 1 for t in [*tensor_inputs, *op.outputs] if t in self.tensors)
            if op.kind != ops.CREATION and (
                (tensor_inputs and all(t in const for t in tensor_inputs))
                or (
                    scalar
                    and op.kind in (ops.ELEMENTWISE, ops.COPY)
                    and all(t in const or t in self.tensors for t in op.inputs)
                )
            ):
                # NB: all-constant inputs, or scalar arithmetic (an attention scale from a shape): folded.
                const.update(op.outputs)
                self.folded += 1
                if op.kind == ops.VIEW and tensor_inputs:  # a broadcast weight still reads the stored tensor
                    source = self._stored.get(tensor_inputs[0], self.tensors[tensor_inputs[0]])
                    self._stored.update({t: source for t in op.outputs})
                continue
            if op.attrs.get("_folded"):
                const.update(op.outputs)
                self.folded += 1
                continue
            kept.append(op)
        self._const = const
        self.ops = kept

    def _drop_dead(self) -> None:
        """Ops none of whose outputs is used or returned are dead code (TVM and ONNX Runtime remove them)."""
        while True:
            users = self._consumers()
            kept = [op for op in self.ops if any(users.get(t) for t in op.outputs)]
            if len(kept) == len(self.ops):
                return
            self.folded += len(self.ops) - len(kept)
            self.ops = kept

    def _consumers(self) -> dict[Any, list[int]]:
        users: dict[Any, list[int]] = {}
        for i, op in enumerate(self.ops):
            for t in op.inputs:
                users.setdefault(t, []).append(i)
        for t in self.graph_outputs:
            users.setdefault(t, []).append(-1)
        return users

    def _fold_bias(self) -> None:
        """matmul/conv -> add(constant bias) becomes one node, the way ``linear``/``addmm``/``conv2d`` count it."""
        users = self._consumers()
        drop: set[int] = set()
        for op in self.ops:
            if op.kind not in (ops.MATMUL, ops.CONV) or len(op.outputs) != 1:
                continue
            out = op.outputs[0]
            consumers = users.get(out, [])
            if len(consumers) != 1 or consumers[0] < 0:
                continue
            j = consumers[0]
            add = self.ops[j]
            if add.bare != "add" or len(add.inputs) != 2 or j in drop:
                continue
            other = add.inputs[1] if add.inputs[0] == out else add.inputs[0]
            if other not in self._const or add.outputs[0] not in self.tensors:
                continue
            bias, y = self.tensors.get(other), self.tensors[add.outputs[0]]
            if (
                bias is None
                or y.shape != self.tensors[out].shape
                or bias.numel > y.shape[-1 if op.kind == ops.MATMUL else 1]
            ):
                continue
            op.inputs = [*op.inputs, other]
            op.outputs = list(add.outputs)
            op.target = f"{op.target}+{add.target}"
            op.attrs["bias_folded"] = True
            drop.add(j)
            self.fused_bias += 1
        self.ops = [op for k, op in enumerate(self.ops) if k not in drop]

    def _fuse_attention(self) -> None:
        """A ``matmul -> ... -> softmax -> ... -> matmul`` region with no other consumer becomes one attention op."""
        while True:
            users = self._consumers()
            producer = {t: i for i, op in enumerate(self.ops) for t in op.outputs}
            region = None
            for s, op in enumerate(self.ops):
                if op.kind == ops.SOFTMAX and op.bare == "softmax":
                    region = self._attention_region(s, users, producer)
                    if region is not None:
                        break
            if region is None:
                return
            first, last, members = region
            qk, pv = self.ops[first], self.ops[last]
            q_id, k_id = (self._absorb_scale(t, first, users, producer, members) for t in qk.inputs[:2])
            q, k_t = self.tensors[qk.inputs[0]], self.tensors[qk.inputs[1]]
            p_in = [t for t in pv.inputs if producer.get(t) not in members]
            v = self.tensors[p_in[0]]
            k = TensorMeta((*k_t.shape[:-2], k_t.shape[-1], k_t.shape[-2]), k_t.dtype)
            outside: list[Any] = []
            for m in sorted(members):
                for t in self.ops[m].inputs:
                    if producer.get(t) not in members and t in self.tensors and t not in outside:
                        outside.append(t)
            core = (q_id, k_id, p_in[0])
            extra = [t for t in outside if t not in core and self.tensors[t].numel > 1]  # masks, biases
            fused = RawOp(
                name=qk.name,
                target=f"{self.source}.attention_pattern",
                bare="scaled_dot_product_attention",
                inputs=[q_id, k_id, p_in[0], *extra],
                outputs=list(pv.outputs),
                attrs={"fused_from": len(members), "backward": False},
                flops=ops.attention_flops(q.shape, k.shape, v.shape),
                module_path=qk.module_path,
            )
            self.ops = [
                *(o for i, o in enumerate(self.ops[:first]) if i not in members),
                fused,
                *(o for i, o in enumerate(self.ops) if i > first and i not in members),
            ]
            self.fused_attention += 1

    def _absorb_scale(self, t: Any, first: int, users: dict, producer: dict, members: set[int]) -> Any:
        """``q * scale`` (or ``k * scale``) feeding only the score matmul, through views, joins the attention."""
        chain: list[int] = []
        cur = t
        for _ in range(6):
            i = producer.get(cur)
            if i is None or len(users.get(cur, [])) != 1:
                return t
            op = self.ops[i]
            chain.append(i)
            if op.kind == ops.VIEW and op.inputs:
                cur = op.inputs[0]
                continue
            if op.kind == ops.ELEMENTWISE and op.bare in ("mul", "div") and len(op.inputs) == 2:
                scalars = [x for x in op.inputs if x in self._const and self.tensors[x].numel <= 1]
                if len(scalars) == 1:
                    members.update(chain)
                    return next(x for x in op.inputs if x not in scalars)
            return t
        return t

    def _attention_region(self, s: int, users: dict, producer: dict) -> tuple[int, int, set[int]] | None:
        # Walk back from the softmax to the score matmul through cheap single-input steps.
        def back(i: int, depth: int = 0) -> int | None:
            if depth > 12:
                return None
            op = self.ops[i]
            srcs = [producer[t] for t in op.inputs if t in producer]
            for src in srcs:
                if self.ops[src].kind == ops.MATMUL and not self.ops[src].attrs.get("bias_folded"):
                    return src
            for src in srcs:
                if self.ops[src].kind in (ops.ELEMENTWISE, ops.VIEW, ops.COPY):
                    found = back(src, depth + 1)
                    if found is not None:
                        return found
            return None

        def forward(i: int, depth: int = 0) -> int | None:
            if depth > 12:
                return None
            for t in self.ops[i].outputs:
                for u in users.get(t, []):
                    if u < 0:
                        continue
                    if self.ops[u].kind == ops.MATMUL and not self.ops[u].attrs.get("bias_folded"):
                        return u
                    if self.ops[u].kind in (ops.ELEMENTWISE, ops.VIEW, ops.COPY, ops.REDUCTION, ops.CREATION):
                        found = forward(u, depth + 1)
                        if found is not None:
                            return found
            return None

        first, last = back(s), forward(s)
        if first is None or last is None or len(self.ops[first].inputs) < 2:
            return None
        # The region: ops that descend from the score matmul and lead to the output matmul.
        desc = {first}
        for i in range(first + 1, last + 1):
            if any(producer.get(t) in desc for t in self.ops[i].inputs):
                desc.add(i)
        anc = {last}
        for i in range(last - 1, first - 1, -1):
            if any(u in anc for t in self.ops[i].outputs for u in users.get(t, [])):
                anc.add(i)
        members = desc & anc
        # Creation ops feeding the region (full_like of the guard) belong to it when only it uses them.
        for i in range(first, last):
            if (
                i not in members
                and self.ops[i].kind == ops.CREATION
                and all(u in members for t in self.ops[i].outputs for u in users.get(t, []))
            ):
                members.add(i)
        allowed = (ops.ELEMENTWISE, ops.VIEW, ops.COPY, ops.REDUCTION, ops.CREATION, ops.SOFTMAX)
        softmaxes = 0
        for m in members:
            op = self.ops[m]
            if m in (first, last):
                continue
            if op.kind not in allowed:
                return None
            softmaxes += op.kind == ops.SOFTMAX
            if any(u not in members for t in op.outputs for u in users.get(t, [])):
                return None  # an intermediate (the probabilities, say) is used elsewhere: keep the ops
        if softmaxes != 1 or any(u not in members for t in self.ops[first].outputs for u in users.get(t, [])):
            return None
        return first, last, members

    # -- OpGraph ----------------------------------------------------------------------------------------------
    def build(
        self, *, name: str = "", phase: str = "inference", notes: Sequence[str] = (), fuse: bool = True
    ) -> OpGraph:
        from perfpredict.compiler_hooks.fx_frontend import _dominant_dtype, _guess_batch_and_seq

        self._fold_constants()
        self._drop_dead()
        if fuse:
            self._fold_bias()
            self._fuse_attention()
        nodes: list[OpNode] = []
        edges: list[tuple[int, int]] = []
        producer: dict[Any, int] = {}
        used_params: dict[Any, TensorMeta] = {}
        for op in self.ops:
            node = self._node(op)
            idx = len(nodes)
            nodes.append(node)
            for t in op.inputs:
                if t in producer and (producer[t], idx) not in edges:
                    edges.append((producer[t], idx))
                if t in self.params:
                    used_params[t] = self.params[t]
            for t in op.outputs:
                producer[t] = idx
        keep = frozenset(producer[t] for t in self.graph_outputs if t in producer)
        user_inputs = [self.tensors[t] for t in self.graph_inputs if t in self.tensors]
        batch, seq = _guess_batch_and_seq(user_inputs)
        real_params = {t: m for t, m in self.params.items() if m.shape and m.numel > 1}
        all_notes = [*notes, *self.notes]
        if self.fused_bias or self.fused_attention:
            all_notes.append(
                f"{self.source}: canonicalised {self.fused_bias} bias add(s) into their matmul/conv and "
                f"{self.fused_attention} attention pattern(s) into attention ops, as the FX frontend sees them"
            )
        param_count = sum(m.numel for m in real_params.values())
        param_bytes = sum(m.nbytes for m in real_params.values())
        return OpGraph(
            nodes=tuple(nodes),
            edges=tuple(edges),
            phase=phase,
            batch_size=batch,
            seq_len=seq,
            dtype=_dominant_dtype(nodes),
            source=self.source,
            param_count=param_count,
            param_bytes=param_bytes,
            trainable_param_count=param_count,
            trainable_param_bytes=param_bytes,
            input_bytes=sum(m.nbytes for m in user_inputs),
            keep_alive=keep,
            notes=tuple(all_notes),
            name=name,
        )

    def _node(self, op: RawOp) -> OpNode:
        kind = op.kind
        inputs = tuple(self.tensors[t] for t in op.inputs if t in self.tensors)
        outputs = tuple(self.tensors[t] for t in op.outputs if t in self.tensors)
        flops = op.flops
        if flops is None:
            flops = rule_flops(op.bare, kind, [self.tensors.get(t) for t in op.inputs], op.attrs, outputs)
        if kind == ops.VIEW:
            read, written = 0, 0
        elif kind == ops.EMBEDDING:
            written = sum(t.nbytes for t in outputs)
            idx = self.tensors.get(op.inputs[1]) if len(op.inputs) > 1 else None
            read, written = written + (idx.nbytes if idx else 0), written
        elif kind == ops.CREATION:
            read, written = 0, sum(t.nbytes for t in outputs)
        else:
            stored = getattr(self, "_stored", {})
            read = sum((stored.get(t) or self.tensors[t]).nbytes for t in op.inputs if t in self.tensors)
            written = sum(t.nbytes for t in outputs)
        params = sum(self.params[t].numel for t in op.inputs if t in self.params and self.params[t].numel > 1)
        attrs = {k: v for k, v in op.attrs.items() if not k.startswith("_")}
        if kind == ops.ELEMENTWISE:
            attrs["kind"] = elementwise_costs.cost_class(op.bare)
        if kind == ops.ATTENTION:
            attrs.setdefault("backward", False)
        if kind == ops.REDUCTION and op.bare == "mean" and _global_spatial_mean(inputs, outputs):
            kind = ops.POOLING  # as FX names adaptive_avg_pool2d(x, 1), which the exporters spell as a mean
        return OpNode(
            name=op.name,
            op=kind,
            target=op.target,
            inputs=inputs,
            outputs=outputs,
            flops=int(flops),
            bytes_read=int(read),
            bytes_written=int(written),
            params=int(params),
            attrs=MappingProxyType(_plain(attrs)),
            module_path=op.module_path,
        )


def _global_spatial_mean(inputs: Sequence[TensorMeta], outputs: Sequence[TensorMeta]) -> bool:
    """A mean over every spatial axis of an NC(D)HW tensor (a global average pool), keeping batch and channels."""
    if not inputs or len(outputs) != 1 or len(inputs[0].shape) not in (4, 5):
        return False
    x, y = inputs[0].shape, outputs[0].shape
    return tuple(y[:2]) == tuple(x[:2]) and outputs[0].numel == x[0] * x[1] and x[0] * x[1] < inputs[0].numel


def rule_flops(
    bare: str, kind: str, metas: Sequence[TensorMeta | None], attrs: Mapping[str, Any], outputs: Sequence[TensorMeta]
) -> int:
    """FLOPs of one op from its bare name, with the argument layout normalised to torch's first."""
    if kind == ops.UNKNOWN:
        return 0
    try:
        if kind == ops.CONV:
            x, w = _layout(metas[0], attrs.get("data_layout")), _layout(metas[1], attrs.get("kernel_layout"))
            out = _layout(outputs[0], attrs.get("out_layout") or attrs.get("data_layout"))
            transposed = "transpose" in bare or bool(attrs.get("transposed"))
            return ops.conv_flops(x.shape, w.shape, out.shape, transposed)
        if kind == ops.ATTENTION and attrs.get("layout") == "BSHD":
            q, k, v = (TensorMeta((m.shape[0], m.shape[2], m.shape[1], m.shape[3]), m.dtype) for m in metas[:3])
            return ops.attention_flops(q.shape, k.shape, v.shape)
        if kind == ops.MATMUL and bare == "mm":  # Gemm with transA / transB
            a, b = metas[0].shape, metas[1].shape
            if attrs.get("transA"):
                a = a[::-1]
            if attrs.get("transB"):
                b = b[::-1]
            return ops.matmul_flops(a, b)
        if kind == ops.POOLING and "kernel" in attrs:
            return ops.pooling_flops(outputs[0].numel if outputs else 0, list(attrs["kernel"]))
    except (IndexError, TypeError, ValueError, AttributeError):
        return 0
    return op_kinds.op_flops(kind, bare, list(metas), (), {}, outputs)


def _layout(meta: TensorMeta | None, layout: Any) -> TensorMeta:
    """Reorder a conv operand to torch's (N|O, C|I, spatial...) from a layout string such as NHWC or HWIO."""
    if meta is None:
        raise ValueError("missing conv operand")
    layout = str(layout or "")
    if not layout or layout in ("NCHW", "OIHW", "NCW", "OIW", "NCDHW", "OIDHW", "IOHW", "IOW", "IODHW"):
        return meta
    first = "N" if "N" in layout else "O"
    second = "C" if "C" in layout else "I"
    if first not in layout or second not in layout or len(layout) != len(meta.shape):
        return meta
    order = [layout.index(first), layout.index(second)] + [i for i, c in enumerate(layout) if c not in (first, second)]
    return TensorMeta(tuple(meta.shape[i] for i in order), meta.dtype)


def _plain(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attribute values as plain Python (ints, floats, strings, tuples) so reports serialise."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[k] = v
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (bool, int, float, str)) for x in v):
            out[k] = tuple(v)
        else:
            out[k] = str(v)
    return out


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)
