"""Single ATen op instances: recorded from the zoo's models, keyed, rebuilt alone on any device.

The op collector (``perfpredict collect --ops``, :mod:`perfpredict.profiling.collect_ops`) times ops one at a
time, so that a per-op device-time model can learn each op kind's efficiency against its roofline bound, as NeuSight
does. Which ops? Exactly those the zoo's models run: :func:`record_ops` runs a spec's step (forward, or forward +
backward + AdamW step) on the **meta** device under a dispatch mode and records every ATen call with its arguments.
Nothing is computed, so a batch-256 model costs milliseconds.

An :class:`OpInstance` key is one-line JSON: the overload (``aten::addmm.default``), and each argument either a
tensor spec (shape, dtype, strides when not contiguous) or a literal. :meth:`OpInstance.build` turns the key back into
the exact call on a real device: tensors with the recorded shapes, dtypes and strides (floats random, integer and
bool tensors zero, so index arguments are always in range), literals as recorded. A planned integer tensor may carry
``"hi": N`` (:mod:`perfpredict.profiling.op_plan`): it is then filled with random indices in ``[0, N)``, so an
embedding reads many rows rather than row 0.

Views and metadata ops launch no kernel and are not recorded; neither are ops whose arguments cannot be written
down (generators, opaque objects).
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from perfpredict.compiler_hooks.op_table import bare_name, classify
from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError

OP_KEY_VERSION = 1
#: canonical kinds that launch no kernel (views) or that the collector cannot time alone
_SKIP_KINDS = frozenset({ops.VIEW})
_SKIP_NAMES = frozenset(
    {"_local_scalar_dense", "item", "lift_fresh", "_assert_async", "set_", "resize_", "record_stream", "copy_"}
)  # copy_ into a parameter: the optimizer's, kept by its foreach ops
_DTYPE_NAMES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
)


class Unrecordable(Exception):
    """An argument the key cannot hold (a generator, an opaque object): the op is not recorded."""


def _tensor_spec(t: Any) -> dict[str, Any]:
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in _DTYPE_NAMES:
        raise Unrecordable(f"dtype {dtype}")
    spec: dict[str, Any] = {"t": list(t.shape), "d": dtype}
    if not t.is_contiguous():
        spec["s"] = list(t.stride())
    return spec


def _encode(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return _tensor_spec(value)
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else {"f": str(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": True}  # the device the op is rebuilt on
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    raise Unrecordable(type(value).__name__)


@dataclass(frozen=True)
class OpInstance:
    """One ATen call: its overload and its encoded arguments. ``kind`` is the canonical op (ops.py)."""

    overload: str  # "aten::addmm.default"
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def name(self) -> str:
        return self.overload.split("::", 1)[1].split(".", 1)[0]

    @property
    def kind(self) -> str:
        return classify(bare_name(self.name))

    def to_key(self) -> str:
        return json.dumps(
            {"v": OP_KEY_VERSION, "op": self.overload, "args": list(self.args), "kwargs": dict(self.kwargs)},
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_key(cls, key: str) -> OpInstance:
        try:
            data = json.loads(key)
            return cls(data["op"], tuple(data["args"]), tuple(sorted(data.get("kwargs", {}).items())))
        except (TypeError, ValueError, KeyError) as err:
            raise InvalidInputError(f"op key {key[:120]!r} is not an op instance key ({err})") from err

    def tensors(self) -> list[dict[str, Any]]:
        """Every tensor spec among the arguments, in order."""
        found: list[dict[str, Any]] = []

        def walk(v: Any) -> None:
            if isinstance(v, dict) and "t" in v:
                found.append(v)
            elif isinstance(v, list):
                for x in v:
                    walk(x)

        for a in (*self.args, *(v for _, v in self.kwargs)):
            walk(a)
        return found

    def io_bytes(self) -> int:
        """Bytes of the tensor arguments (what the op reads at least once; outputs are measured on the result)."""
        return sum(_numel(t["t"]) * ops.DTYPE_BYTES[t["d"]] for t in self.tensors())

    def dtype(self) -> str:
        """The dtype of the first floating tensor argument (else the first tensor's)."""
        specs = self.tensors()
        floats = [t["d"] for t in specs if t["d"].startswith(("float", "bfloat"))]
        return floats[0] if floats else (specs[0]["d"] if specs else "none")

    def packet(self) -> Any:
        """The ``torch.ops`` overload object this key names."""
        import torch

        ns, rest = self.overload.split("::", 1)
        name, overload = rest.split(".", 1) if "." in rest else (rest, "default")
        try:
            return getattr(getattr(getattr(torch.ops, ns), name), overload)
        except AttributeError as err:
            raise InvalidInputError(f"op {self.overload!r} does not exist in this torch build") from err

    def materialize(
        self, device: Any = "cpu", seed: int = 0, on_device: bool = False
    ) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments on ``device``: fresh tensors with the recorded shapes, dtypes and strides.

        ``on_device`` draws the random values on ``device`` itself, in the tensor's dtype (a generator of the
        device's own) instead of in float32 on the host and copying them over: the same distributions, other values,
        and no host time for a GPU's large operands."""
        import torch

        local = on_device and str(device) != "meta"
        gen = torch.Generator(device=device if local else "cpu").manual_seed(seed)
        return [_decode(a, device, gen, local) for a in self.args], {
            k: _decode(v, device, gen, local) for k, v in self.kwargs
        }

    def build(self, device: Any = "cpu", seed: int = 0, on_device: bool = False) -> Callable[[], Any]:
        """A zero-argument callable that runs this exact op on ``device`` with fresh tensors (``on_device``: see
        :meth:`materialize`)."""
        fn = self.packet()
        args, kwargs = self.materialize(device, seed, on_device)

        def call() -> Any:
            return fn(*args, **kwargs)

        return call


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _decode(value: Any, device: Any, gen: Any, local: bool = False) -> Any:
    """One encoded argument as a value on ``device``; ``local``: ``gen`` lives on ``device`` and draws there."""
    import torch

    if isinstance(value, list):
        return [_decode(v, device, gen, local) for v in value]
    if not isinstance(value, dict):
        return value
    if "t" in value:
        dtype = getattr(torch, value["d"])
        shape, strides = value["t"], value.get("s")
        if str(device) == "meta":
            return torch.empty_strided(shape, strides or _dense_strides(shape), dtype=dtype, device="meta")
        strides = strides or _dense_strides(shape)
        storage = 1 + sum((int(n) - 1) * int(st) for n, st in zip(shape, strides)) if _numel(shape) else 0
        where = device if local else "cpu"
        if dtype.is_floating_point:
            flat = torch.randn(storage, generator=gen, device=where, dtype=dtype if local else torch.float32).to(dtype)
        elif value.get("hi"):  # a planned index tensor: random rows in [0, hi)
            flat = torch.randint(0, int(value["hi"]), (storage,), generator=gen, device=where, dtype=dtype)
        else:  # index arguments (embedding, gather, targets) stay in range
            flat = torch.zeros(storage, dtype=dtype, device=where)
        base = flat.as_strided(shape, strides)
        return base.to(device)
    if "f" in value:
        return float(value["f"])
    if "dtype" in value:
        return getattr(torch, value["dtype"])
    if "device" in value:
        return torch.device(device)
    if "layout" in value:
        return getattr(torch, value["layout"])
    if "memory_format" in value:
        return getattr(torch, value["memory_format"])
    raise InvalidInputError(f"op argument {value!r} cannot be rebuilt")


def _dense_strides(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return list(reversed(strides))


def record_ops(step: Callable[[], Any]) -> list[OpInstance]:
    """Every kernel-launching ATen call of one ``step()`` (run it on the meta device), in call order."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[OpInstance] = []

    class _Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.__name__.split(".")[0]
            if name == "_local_scalar_dense":  # .item() on meta (HF's "is the mask all ones?"): the dense answer
                return True if args[0].dtype == torch.bool else 1 if not args[0].is_floating_point() else 1.0
            if name not in _SKIP_NAMES and classify(bare_name(name)) not in _SKIP_KINDS:
                with contextlib.suppress(Unrecordable):  # an argument the key cannot hold: not recorded
                    seen.append(
                        OpInstance(
                            f"{func.namespace}::{func.__name__}",
                            tuple(_encode(a) for a in args),
                            tuple(sorted((k, _encode(v)) for k, v in kwargs.items())),
                        )
                    )
            return func(*args, **kwargs)

    with _Recorder():
        step()
    return [op for op in seen if op.overload.startswith("aten::")]


def spec_ops(spec: Any) -> list[OpInstance]:
    """The op instances of one zoo spec's step, traced on the meta device."""
    import torch.fx.experimental._config as fx_config

    from perfpredict.profiling import zoo

    model = spec.build("meta")
    x, labels = spec.inputs("meta")
    with fx_config.patch(meta_nonzero_assume_all_nonzero=True):  # DeBERTa's relative positions call nonzero()
        return record_ops(zoo.make_step(model, x, labels, spec.phase))


def validate(op: OpInstance) -> bool:
    """True when the op runs on the meta device with these arguments (shapes agree): a cheap check for variants."""
    try:
        op.build("meta")()
    except Exception:  # noqa: BLE001 - any failure means the variant is not a valid op
        return False
    return True


def variants(op: OpInstance, rng: random.Random, n: int, max_bytes: int) -> list[OpInstance]:
    """Up to ``n`` ops around ``op``: one dimension value (every tensor axis and size-list entry equal to it)
    scaled by a factor in [0.5, 2], rounded to a multiple of 8 half of the time (tile remainders matter), strides
    made dense in the recorded order. Each is checked on the meta device; ones over ``max_bytes`` are dropped."""
    dims = sorted({d for t in op.tensors() for d in t["t"] if d > 1})
    out: list[OpInstance] = []
    seen = {op.to_key()}
    for _ in range(4 * n):
        if not dims or len(out) >= n:
            break
        old = rng.choice(dims)
        new = max(2, round(old * 2 ** rng.uniform(-1, 1)))
        if rng.random() < 0.5:
            new = max(8, 8 * round(new / 8))
        if new == old:
            continue
        cand = OpInstance(
            op.overload,
            tuple(_swap(a, old, new) for a in op.args),
            tuple((k, _swap(v, old, new)) for k, v in op.kwargs),
        )
        key = cand.to_key()
        if key in seen or cand.io_bytes() > max_bytes or not validate(cand):
            continue
        seen.add(key)
        out.append(cand)
    return out


def _swap(value: Any, old: int, new: int) -> Any:
    """``value`` with the dimension ``old`` replaced by ``new`` in tensor shapes and in lists of ints."""
    if isinstance(value, dict) and "t" in value:
        shape = [new if d == old else d for d in value["t"]]
        spec = {"t": shape, "d": value["d"]}
        if "s" in value:  # keep the axis order and broadcast (stride 0) axes, dense otherwise
            order = sorted(range(len(shape)), key=lambda i: value["s"][i], reverse=True)
            strides, acc = [0] * len(shape), 1
            for i in reversed(order):
                strides[i] = 0 if value["s"][i] == 0 else acc
                acc *= 1 if value["s"][i] == 0 else max(shape[i], 1)
            spec["s"] = strides
        return spec
    if isinstance(value, list):
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [new if v == old else v for v in value]
        return [_swap(v, old, new) for v in value]
    return value
