"""The op-kind registry: each kind registered once, with everything the package knows about it.

In the manner of ``torch.utils.flop_counter.register_flop_formula`` and dynamo's backend registry, a kind is one
:class:`OpKind` passed to :func:`register_op_kind`: its FLOP rule, its byte rule, whether it runs on tensor cores
(and which of torch's TF32 switches governs it in float32), whether inductor fuses it into its neighbours, and the
tiny call ``calibrate-host`` times to learn its dispatch cost. The built-in kinds are registered in
:mod:`perfpredict.core.op_kinds.builtin`; frontends only map their op names to a kind's name
(``compiler_hooks/op_table.py``, ``op_names.py``).

A rule is written against torch's argument layout of the bare op name (``addmm(bias, a, b)``); frontends that
spell an op otherwise (ONNX, Relax) normalise to that layout first (``dataflow_builder.rule_flops``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError


class TensorMeta(Protocol):
    """What a rule reads of a tensor: ``perfpredict.core.graph.TensorMeta`` (not imported: the graph asks this
    registry whether its nodes are known and views, so the registry cannot import the graph)."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int: ...

    @property
    def nbytes(self) -> int: ...


#: FLOPs of one call: (bare name, tensor argument metas by position, the call's args, kwargs, output metas)
FlopRule = Callable[[str, Sequence[TensorMeta | None], Sequence[Any], dict, Sequence[TensorMeta]], int]
#: (bytes read, bytes written) of one call: (bare name, distinct tensor inputs, outputs, argument metas)
ByteRule = Callable[[str, Sequence[TensorMeta], Sequence[TensorMeta], Sequence[TensorMeta | None]], tuple[int, int]]
#: builds its own tiny CPU tensors and returns the call that ``calibrate-host`` times (torch imported inside)
HostProbe = Callable[[], Callable[[], Any]]
#: which torch switch lets a float32 op of the kind run as TF32: ``torch.backends.cuda.matmul.allow_tf32``
#: (RunConfig.tf32, off by default) or ``torch.backends.cudnn.allow_tf32`` (RunConfig.conv_tf32, on by default)
TF32_SWITCHES = ("matmul", "cudnn")


def unfused_bytes(
    name: str, inputs: Sequence[TensorMeta], outputs: Sequence[TensorMeta], arg_metas: Sequence[TensorMeta | None]
) -> tuple[int, int]:
    """The default byte rule, for an op that runs as its own kernel: every input read once, every output written once."""
    return sum(t.nbytes for t in inputs), sum(t.nbytes for t in outputs)


@dataclass(frozen=True)
class OpKind:
    """One canonical op kind. ``flops=None`` counts the kind as free of arithmetic (data movement only)."""

    name: str
    flops: FlopRule | None = None
    bytes: ByteRule = unfused_bytes
    tensor_cores: bool = False  # runs on tensor cores where the dtype allows it (matmul, conv, attention)
    tf32_switch: str | None = None  # one of TF32_SWITCHES, for a tensor-core kind
    fusible: bool = False  # inductor fuses runs of these into one kernel (pointwise and reduction templates)
    is_view: bool = False  # launches nothing and moves nothing (a reshape, a transpose)
    host_probe: HostProbe | None = None
    known: bool = True  # False only for ops.UNKNOWN: the one kind without a cost model

    def __post_init__(self) -> None:
        if self.tensor_cores and self.tf32_switch not in TF32_SWITCHES:
            raise InvalidInputError(
                f"op kind {self.name!r} runs on tensor cores but its tf32_switch is {self.tf32_switch!r}; "
                f"choose one of {', '.join(TF32_SWITCHES)}"
            )


UNKNOWN_KIND = OpKind(ops.UNKNOWN, known=False)
_KINDS: dict[str, OpKind] = {ops.UNKNOWN: UNKNOWN_KIND}
_VIEWS: set[str] = set()  # the view kinds' names: every graph walk asks is_view of every node


def register_op_kind(kind: OpKind) -> OpKind:
    """Add ``kind`` to the registry (a name registered twice raises: one place per kind)."""
    if kind.name in _KINDS:
        raise InvalidInputError(f"op kind {kind.name!r} is already registered; pick another name")
    _KINDS[kind.name] = kind
    if kind.is_view:
        _VIEWS.add(kind.name)
    return kind


def get_op_kind(name: str) -> OpKind:
    """The registered kind called ``name``; an unknown name raises, listing the registered ones."""
    try:
        return _KINDS[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown op kind {name!r}; registered: {', '.join(list_op_kinds())} "
            "(register a new one with perfpredict.core.op_kinds.register_op_kind)"
        ) from None


def list_op_kinds() -> list[str]:
    """Every registered kind's name, ``unknown`` included, sorted."""
    return sorted(_KINDS)


def lookup(name: str) -> OpKind:
    """The kind called ``name``, or the unknown kind: for graph nodes, which may carry any name."""
    return _KINDS.get(name, UNKNOWN_KIND)


def is_known(name: str) -> bool:
    """Whether ``name`` is a registered kind with a cost model."""
    return lookup(name).known


def is_fusible(name: str) -> bool:
    return lookup(name).fusible


def is_view(name: str) -> bool:
    return name in _VIEWS


def op_flops(
    kind: str,
    name: str,
    arg_metas: Sequence[TensorMeta | None],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    outputs: Sequence[TensorMeta],
) -> int:
    """FLOPs of one call of bare name ``name`` and kind ``kind``; 0 for a kind without a FLOP rule or missing shapes."""
    rule = lookup(kind).flops
    if rule is None:
        return 0
    try:
        return int(rule(name, list(arg_metas), args, kwargs, outputs))
    except (IndexError, TypeError, ValueError, AttributeError):
        return 0  # NB: a spelling we do not know the argument layout of; counted as free rather than guessed


def op_bytes(
    kind: str,
    name: str,
    inputs: Sequence[TensorMeta],
    outputs: Sequence[TensorMeta],
    arg_metas: Sequence[TensorMeta | None],
) -> tuple[int, int]:
    """(bytes read, bytes written) of one call when nothing is fused, by its kind's byte rule."""
    return lookup(kind).bytes(name, inputs, outputs, arg_metas)


def host_probes() -> dict[str, Callable[[], Any]]:
    """The call ``calibrate-host`` times for each kind that has one, in registration order."""
    return {name: kind.host_probe() for name, kind in _KINDS.items() if kind.host_probe is not None}
