"""NeuSight's per-op GPU measurements (github sitar-lab/NeuSight, MIT) as op rows.

What NeuSight timed (``neusight/Dataset/collect.py``): one PyTorch 2.1 op at a time, fp32, inside
``torch.no_grad()``, with ``cudnn.benchmark`` on and TF32 off for cuDNN (and off for matmuls, torch's default). Each
latency is the mean of the fastest 5 of 25 calls, each call timed alone between a CUDA event pair with a
synchronize after it. So a row is the op's kernel time plus the host's launch latency inside the event pair: tiny
ops read 25-50 us on these hosts. The device-time model takes that floor off per GPU (``launch_floor_ms``).

Files read: ``scripts/asplos/data/dataset/train/collect/<op>/p2.1.0/<GPU>.csv`` (the training shapes, on P4, P100,
T4, V100 and A100-40GB PCIe) and ``scripts/asplos/data/dataset/test/{bmm,linear,elem,ln,softmax}.csv`` (the
out-of-distribution shapes, on all eight GPUs for bmm and linear, and on seven, without the H100, for the others).
Never read here: ``scripts/asplos/label/`` and ``summary/``, NeuSight's end-to-end labels, which are a published
table to score against (:func:`e2e_table`, used by ``benchmarks/external_neusight.py`` only).

Op semantics (``profile_kernel``): ``bmm`` is ``torch.bmm([B,M,N], [B,N,K])``; ``linear`` is
``nn.Linear(N, K, bias=True)`` on ``[B,M,N]``; ``conv`` is ``nn.Conv2d(Cin, Cout, k, stride, padding, bias=False)``
on ``[B,Cin,S,S]``; the elementwise ops take ``[B,H]`` tensors (``add``, ``mul``, ``pow``, ``div`` two of them; ``addu``,
``mulu``, ``powu``, ``divu`` one and a Python scalar; ``relu``, ``gelu``, ``tanh`` one); ``ln`` is
``nn.LayerNorm(H)`` and ``softmax`` ``nn.Softmax()`` (the last dimension) on ``[B,H]``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from perfpredict.external.op_rows import op_row
from perfpredict.external.source_tree import SourceTree

SOURCE = "neusight"
DATASET = "scripts/asplos/data/dataset"
TRAIN_OPS = (
    "bmm",
    "linear",
    "conv",
    "add",
    "addu",
    "mul",
    "mulu",
    "pow",
    "powu",
    "div",
    "divu",
    "relu",
    "gelu",
    "tanh",
    "ln",
    "softmax",
)
TEST_FILES = ("bmm", "linear", "elem", "ln", "softmax")  # vec.csv and habitat.csv repeat elem + ln + softmax
DEVICE_METHOD = "cuda_event_pair_per_call_fastest5_of_25"
TORCH_VERSION = "2.1.0"
F32 = "float32"
#: NeuSight op name -> (aten name for the flop rule and the key, the op's overload, unary with a scalar)
_ELEMENTWISE = {
    "add": ("add", "aten::add.Tensor", False),
    "mul": ("mul", "aten::mul.Tensor", False),
    "pow": ("pow", "aten::pow.Tensor_Tensor", False),
    "div": ("div", "aten::div.Tensor", False),
    "addu": ("add", "aten::add.Scalar", True),
    "mulu": ("mul", "aten::mul.Scalar", True),
    "powu": ("pow", "aten::pow.Tensor_Scalar", True),
    "divu": ("div", "aten::div.Scalar", True),
    "relu": ("relu", "aten::relu.default", True),
    "gelu": ("gelu", "aten::gelu.default", True),
    "tanh": ("tanh", "aten::tanh.default", True),
}
_WITH_SCALAR = frozenset({"addu", "mulu", "powu", "divu"})
_SCALAR = 0.5  # NeuSight used a random scalar in (0, 1]; its value does not change the kernel


def convert(tree: SourceTree, device_name: Any) -> Iterator[dict[str, Any]]:
    """Every op row of the NeuSight dataset in ``tree``; ``device_name(gpu)`` maps a GPU name to the catalog."""
    for path in tree.files(f"{DATASET}/train/collect"):
        parts = path.split("/")
        if len(parts) < 3 or parts[-3] not in TRAIN_OPS or not path.endswith(".csv"):
            continue  # the merged <op>.csv files repeat the per-GPU ones
        yield from _rows(tree, path, "train", device_name)
    for name in TEST_FILES:
        yield from _rows(tree, f"{DATASET}/test/{name}.csv", "test", device_name)


def _rows(tree: SourceTree, path: str, split: str, device_name: Any) -> Iterator[dict[str, Any]]:
    for rec in csv.DictReader(io.StringIO(tree.read_text(path))):
        latency = float(rec["Latency"])
        if not latency > 0:
            continue
        gpu = rec["Device"].strip()
        row = row_of(rec["OPName"], rec, latency)
        row.update(
            source=SOURCE,
            source_file=path,
            source_split=split,
            source_op=rec["OPName"],
            device=device_name(gpu),
            env_device_name=gpu,
            env_torch_version=TORCH_VERSION,
            device_method=DEVICE_METHOD,
        )
        yield row


def row_of(op: str, rec: dict[str, str], latency_ms: float) -> dict[str, Any]:
    """The op row of one NeuSight record (its dimension columns as strings)."""
    d = {k: int(float(v)) for k, v in rec.items() if k in _DIMS and v not in ("", None)}
    if op == "bmm":
        b, m, n, k = d["B"], d["M"], d["N"], d["K"]
        ins = [([b, m, n], F32), ([b, n, k], F32)]
        return op_row(
            target="bmm", inputs=ins, output=([b, m, k], F32), device_ms=latency_ms, key=_key("aten::bmm.default", ins)
        )
    if op == "linear":
        b, m, n, k = d["B"], d["M"], d["N"], d["K"]
        ins = [([b, m, n], F32), ([k, n], F32), ([k], F32)]
        return op_row(
            target="linear",
            inputs=ins,
            output=([b, m, k], F32),
            device_ms=latency_ms,
            key=_key("aten::linear.default", ins),
        )
    if op == "conv":
        return _conv(d, latency_ms)
    if op in _ELEMENTWISE:
        name, overload, unary = _ELEMENTWISE[op]
        shape = [d["B"], d["H"]]
        ins = [(shape, F32)] if unary else [(shape, F32), (shape, F32)]
        extra = [_SCALAR] if op in _WITH_SCALAR else []
        return op_row(
            target=name, inputs=ins, output=(shape, F32), device_ms=latency_ms, key=_key(overload, ins, extra)
        )
    if op == "ln":
        b, h = d["B"], d["H"]
        ins = [([b, h], F32), ([h], F32), ([h], F32)]
        key = _key("aten::layer_norm.default", ins[:1], [[h]], ins[1:], [1e-5, True])
        return op_row(target="layer_norm", inputs=ins, output=([b, h], F32), device_ms=latency_ms, key=key)
    if op == "softmax":
        shape = [d["B"], d["H"]]
        key = _key("aten::_softmax.default", [(shape, F32)], [1, False])
        return op_row(target="softmax", inputs=[(shape, F32)], output=(shape, F32), device_ms=latency_ms, key=key)
    raise ValueError(f"unknown NeuSight op {op!r}")


_DIMS = {"B", "M", "N", "K", "H", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride", "Padding"}


def _conv(d: dict[str, int], latency_ms: float) -> dict[str, Any]:
    b, cin, cout, k = d["B"], d["Input_Channel"], d["Output_Channel"], d["Kernel_Szie"]
    size, stride, pad = d["Input_Size"], d["Stride"], d["Padding"]
    out = (size + 2 * pad - k) // stride + 1
    ins = [([b, cin, size, size], F32), ([cout, cin, k, k], F32)]
    args = [None, None, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1]
    key = _key("aten::convolution.default", ins, [None, *args[3:]])
    return op_row(
        target="convolution", inputs=ins, output=([b, cout, out, out], F32), device_ms=latency_ms, args=args, key=key
    )


def _key(overload: str, tensors: list, *rest: list) -> str:
    """The OpInstance key of an aten call: tensor arguments first, then the literal ones, in order."""
    from perfpredict.profiling.op_instances import OP_KEY_VERSION

    args: list[Any] = [{"t": list(s), "d": dt} for s, dt in tensors]
    for part in rest:
        if part and isinstance(part[0], tuple):  # more tensors after literals (layer_norm's weight and bias)
            args += [{"t": list(s), "d": dt} for s, dt in part]
        else:
            args += list(part)
    return json.dumps(
        {"v": OP_KEY_VERSION, "op": overload, "args": args, "kwargs": {}}, sort_keys=True, separators=(",", ":")
    )


def e2e_table(tree: SourceTree) -> list[dict[str, Any]]:
    """NeuSight's published end-to-end table (``scripts/asplos/summary/summary.csv``): the measured latency and the
    NeuSight, roofline and Habitat predictions per (model, sequence, batch, GPU, mode, option). SCORING ONLY: these
    labels are never fitted or tuned on."""
    keep = ("model_name", "seqlen", "batch", "device", "mode", "option", "OOD")
    values = ("label", "neusight", "roofline", "habitat")
    parts = ("e2e", "fw", "bwall")
    out = []
    for rec in csv.DictReader(io.StringIO(tree.read_text("scripts/asplos/summary/summary.csv"))):
        row: dict[str, Any] = {k: rec.get(k, "") for k in keep}
        for v in values:
            for p in parts:
                raw = rec.get(f"{v}_all_{p}_latency", "")
                row[f"{v}_{p}_ms"] = float(raw) if raw not in ("", None) else None
        out.append(row)
    return out
