"""An ONNX file and the user's input shapes (``input_ids=1x128``) to one OpGraph.

The CLI (``perfpredict predict --onnx``) and the web page's upload both read files through here. Everything raises
perfpredict's own errors with the fix in the message.
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
    path: str | os.PathLike[str], input_shapes: Iterable[str] | None = None, phase: str = "inference"
) -> OpGraph:
    """The OpGraph of the ONNX file at ``path`` with ``--input-shape`` strings applied.

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
            f"--input-shape {name}={example} (replace N by a size)"
        )
    return graph_from_onnx(proto, input_shapes=shapes, phase=phase, name=os.path.splitext(os.path.basename(path))[0])
