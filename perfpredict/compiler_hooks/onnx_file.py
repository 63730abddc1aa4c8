"""An ONNX file and the user's input shapes (``input_ids=1x128``, ``--batch``, ``--seq``) to one OpGraph.

The CLI (``perfpredict predict --onnx``) and the web page's upload both read files through here. Everything raises
perfpredict's own errors with the fix in the message.

``--batch`` sizes the first dimension of every input, ``--seq`` the second of every ``(batch, seq)`` input (token
ids, masks) and of a ``(batch, seq, features)`` input where it is dynamic: a dynamic dimension takes the size asked,
a static one that disagrees is refused (the file was exported for that size). ``--input-shape`` names an input's
whole shape and wins over both, where it agrees with them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from perfpredict.core.errors import FrontendError, InvalidInputError, MissingDependencyError, close_matches
from perfpredict.core.graph import OpGraph

_ONNX_MAGIC_HINT = "export one with torch.onnx.export(model, args, 'model.onnx', dynamo=True)"


def parse_input_shapes(specs: Iterable[str] | None) -> dict[str, tuple[int, ...]]:
    """``["input_ids=1x128", "pixel_values=1x3x224x224"]`` -> ``{"input_ids": (1, 128), ...}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        name, sep, dims = str(spec).partition("=")
        name, dims = name.strip(), dims.strip().lower().replace(",", "x").replace("*", "x")
        try:
            shape = tuple(int(d) for d in dims.split("x")) if dims else ()
        except ValueError:
            shape = None
        if not sep or not name or not shape or any(d < 1 for d in shape):
            raise InvalidInputError(
                f"--input-shape {spec!r} is not NAME=DIMxDIM...; for example --input-shape input_ids=1x128"
            )
        if name in shapes:
            raise InvalidInputError(f"--input-shape gives {name!r} twice")
        shapes[name] = shape
    return shapes


def graph_from_onnx_args(
    path: str | os.PathLike[str],
    input_shapes: Iterable[str] | None = None,
    phase: str = "inference",
    *,
    batch: int | None = None,
    seq: int | None = None,
    dtype: str | None = None,
) -> OpGraph:
    """The OpGraph of the ONNX file at ``path`` with ``--input-shape`` strings, ``--batch`` and ``--seq`` applied
    (see the module docstring), its floating tensors in ``dtype`` where one is given.

    Raises InvalidInputError (missing file, bad --input-shape, dynamic input without a shape) or FrontendError
    (not an ONNX file), each with a one-line message that names the fix.
    """
    path = os.fspath(path)
    shapes = parse_input_shapes(input_shapes)
    if not os.path.exists(path):
        raise InvalidInputError(f"ONNX file {path!r} does not exist; pass the path of a .onnx model")
    if os.path.isdir(path):
        raise InvalidInputError(f"{path!r} is a directory; pass the path of a .onnx model file")
    try:
        import onnx  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError(
            "'onnx' is not installed; install it with: pip install \"perfpredict[onnx]\""
        ) from err
    from perfpredict.compiler_hooks.onnx_frontend import dynamic_inputs, graph_from_onnx, load_onnx

    proto = load_onnx(path)  # FrontendError for a file that is not ONNX
    if not len(proto.graph.node):
        raise FrontendError(
            f"{path!r} parsed as ONNX but holds no graph nodes; it is probably not an ONNX model ({_ONNX_MAGIC_HINT})"
        )
    inputs = dynamic_inputs(proto)
    unknown = [name for name in shapes if name not in inputs]
    if unknown:
        close = close_matches(unknown[0], inputs)
        given = ", ".join(
            f"{n}={'x'.join(str(d) if isinstance(d, int) and d > 0 else 'N' for d in dims)}"
            for n, dims in inputs.items()
        )
        raise InvalidInputError(
            f"--input-shape names {unknown[0]!r}, which is not an input of {os.path.basename(path)!r}"
            + (f" (did you mean {close}?)" if close else "")
            + f"; its inputs are: {given or 'none'}"
        )
    shapes = sized(inputs, shapes, batch, seq, os.path.basename(path))
    dynamic = {
        name: dims
        for name, dims in inputs.items()
        if name not in shapes and any(not isinstance(d, int) or d < 1 for d in dims)
    }
    if dynamic:
        name, dims = next(iter(dynamic.items()))
        example = "x".join(str(d) if isinstance(d, int) and d > 0 else "N" for d in dims)
        raise InvalidInputError(
            f"input {name!r} of {os.path.basename(path)!r} has dynamic dimensions {dims!r}; give its shape with "
            f"--input-shape {name}={example} (replace N by a size; --batch and --seq fill a batch and a sequence "
            "dimension)"
        )
    name = os.path.splitext(os.path.basename(path))[0]
    return graph_from_onnx(proto, input_shapes=shapes, phase=phase, name=name, dtype=dtype)


def _dynamic(dim: object) -> bool:
    return not isinstance(dim, int) or dim < 1


def sized(
    inputs: dict[str, list], shapes: dict[str, tuple[int, ...]], batch: int | None, seq: int | None, file: str
) -> dict[str, tuple[int, ...]]:
    """``shapes`` with every other input whose dimensions ``batch`` and ``seq`` settle added (see the module
    docstring); refuses a static dimension, or an ``--input-shape``, that disagrees, and a ``seq`` no input has."""
    out = dict(shapes)
    seq_inputs = []
    for name, dims in inputs.items():
        wants = {}
        if batch is not None and dims and (_dynamic(dims[0]) or len(dims) >= 2):
            wants[0] = ("--batch", batch)
        if seq is not None and (len(dims) == 2 or (len(dims) == 3 and _dynamic(dims[1]))):
            wants[1] = ("--seq", seq)
            seq_inputs.append(name)
        given = shapes.get(name)
        for axis, (flag, size) in wants.items():
            has = given[axis] if given is not None and axis < len(given) else dims[axis]
            if not _dynamic(has) and has != size:
                where = "--input-shape gives" if given is not None else "the file exports"
                raise InvalidInputError(
                    f"{flag} {size} disagrees with input {name!r} of {file!r}: {where} {has} there "
                    f"({'x'.join(str(d) if not _dynamic(d) else 'N' for d in (given or dims))}); drop {flag}, or give "
                    "that input's whole shape with --input-shape NAME=DIMS (a static dimension holds only where the "
                    "graph's reshapes allow another size; re-export with a dynamic one otherwise)"
                )
        if given is None and wants:
            shape = [wants[i][1] if i in wants else d for i, d in enumerate(dims)]
            if not any(_dynamic(d) for d in shape):
                out[name] = tuple(shape)
    if seq is not None and not seq_inputs:
        listed = ", ".join(
            f"{n}={'x'.join(str(d) if not _dynamic(d) else 'N' for d in dims)}" for n, dims in inputs.items()
        )
        raise InvalidInputError(
            f"--seq {seq} sizes the sequence dimension of a (batch, seq) input, and {file!r} has none (its inputs: "
            f"{listed or 'none'}); drop --seq, or give the shapes with --input-shape NAME=DIMS"
        )
    return out
