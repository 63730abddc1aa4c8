"""Op kinds: each registered once, with its FLOP and byte rules, tensor-core use, fusibility and host probe.

``registry`` holds :class:`OpKind` and :func:`register_op_kind`; ``builtin`` registers the package's kinds;
``compute_unit`` decides, once for every caller, whether an op runs on tensor cores and at what rate;
``elementwise_costs`` is the per-element cost of each torch elementwise op.
"""

from perfpredict.core.op_kinds import builtin
from perfpredict.core.op_kinds.builtin import BUILTIN_KINDS
from perfpredict.core.op_kinds.compute_unit import attainable_rate, compute_dtype, uses_tensor_cores
from perfpredict.core.op_kinds.registry import (
    OpKind,
    get_op_kind,
    host_probes,
    is_fusible,
    is_known,
    is_view,
    list_op_kinds,
    lookup,
    op_bytes,
    op_flops,
    register_op_kind,
)

__all__ = [
    "BUILTIN_KINDS",
    "OpKind",
    "attainable_rate",
    "builtin",
    "compute_dtype",
    "get_op_kind",
    "host_probes",
    "is_fusible",
    "is_known",
    "is_view",
    "list_op_kinds",
    "lookup",
    "op_bytes",
    "op_flops",
    "register_op_kind",
    "uses_tensor_cores",
]
