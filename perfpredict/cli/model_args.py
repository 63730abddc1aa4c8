"""The model and run the arguments name: the options every model command shares, the run dtype, the OpGraph."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from perfpredict.cli.args import DTYPE_CHOICES, non_negative_int, positive_float, positive_int
from perfpredict.hardware.precision import OPTIMIZERS, PRECISIONS
from perfpredict.predictors.base import DEFAULT_MODE, DEFAULT_PREDICTOR, RUN_MODES


def add_model_args(p: argparse.ArgumentParser, top_default: int | None) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", metavar="ID", help="a shipped HuggingFace id or alias (see `perfpredict models`)")
    src.add_argument("--config", metavar="PATH", help="a HuggingFace config.json (or a folder holding one)")
    src.add_argument("--onnx", metavar="PATH", help="an ONNX file (any exporter; external data is read too)")
    p.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=DIMS",
        default=None,
        help="ONNX input shape for dynamic dimensions, e.g. input_ids=1x128 (repeatable)",
    )
    p.add_argument("--device", default="H100-SXM", help="catalog device name (see `perfpredict devices`)")
    p.add_argument("--batch", type=positive_int("batch size"), default=1, help="batch size (default 1)")
    p.add_argument(
        "--seq",
        type=positive_int("sequence length"),
        default=None,
        help="sequence length for text models (default: the model's shipped default)",
    )
    p.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default=None,
        help="weights and activations dtype (default: the config's torch_dtype, else float32; in "
        "training, the --precision's compute dtype)",
    )
    p.add_argument("--training", action="store_true", help="predict a training step (fwd + bwd + optimizer)")
    p.add_argument(
        "--precision",
        choices=tuple(PRECISIONS),
        default=None,
        help="training recipe (default on a GPU: amp-bf16, bf16 compute with fp32 master weights, or "
        "amp-fp16 where the GPU has no bf16; on a CPU: fp32; --dtype float32 means fp32)",
    )
    p.add_argument(
        "--optimizer",
        choices=tuple(OPTIMIZERS),
        default="adamw",
        help="training optimizer (default adamw; its state bytes: see the docs' memory section)",
    )
    p.add_argument(
        "--tf32",
        action="store_true",
        help="let float32 matmuls use TF32 (torch.backends.cuda.matmul.allow_tf32; convolutions do by default)",
    )
    p.add_argument(
        "--weights-built-in",
        choices=(*DTYPE_CHOICES, "none"),
        default="none",
        help="dtype the weights are built in before the cast to --dtype ('none', the default: loaded "
        "straight in --dtype, as from_pretrained(dtype=...) does; float32: Model(config).to(dtype))",
    )
    p.add_argument(
        "--predictor",
        default=DEFAULT_PREDICTOR,
        help="auto (default: two_timeline, the same model for every device), analytical, two_timeline, "
        "or a learned whole-model predictor where trained: xgboost, graphsage, gae_gnn",
    )
    p.add_argument(
        "--mode",
        choices=RUN_MODES,
        default=DEFAULT_MODE,
        help="how the step runs, for the two-timeline predictor: eager (default), cuda_graph, compiled "
        "(torch.compile), compiled_cuda_graph (torch.compile mode='reduce-overhead')",
    )
    p.add_argument(
        "--host",
        default=None,
        metavar="NAME",
        help="the host CPU that drives the GPU (its dispatch and launches time an eager step): h100-server (a "
        "16-vCPU Xeon GPU server, the default), dev-vm, or calibrated (`perfpredict calibrate-host`'s; used by "
        "default once it exists)",
    )
    p.add_argument("--max-latency-ms", type=positive_float, default=None, help="latency target for MIG advice")
    p.add_argument(
        "--min-throughput", type=positive_float, default=None, help="throughput target (samples/s) for MIG advice"
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="capture the model again instead of reading the on-disk graph cache (and refresh it)",
    )
    p.add_argument(
        "--top",
        type=non_negative_int,
        default=top_default,
        help="per-op rows to show" + (f" (default {top_default})" if top_default else " (default all)"),
    )


def graph_from_args(args: argparse.Namespace, phase: str) -> tuple[Any, str]:
    """The OpGraph of the model the arguments name (an ONNX file, or a HuggingFace id or config)."""
    if args.onnx:
        from perfpredict.compiler_hooks.onnx_file import graph_from_onnx_args

        return graph_from_onnx_args(args.onnx, args.input_shape or [], phase=phase), Path(args.onnx).stem
    from perfpredict.compiler_hooks.hf_capture import cached

    # built in the run dtype on the meta device (a deep layer stack traced with two layers and copied), or read
    # from the on-disk graph cache
    return cached(
        args.hf or args.config,
        batch_size=args.batch,
        seq_len=args.seq,
        dtype=args.run.dtype,
        phase=phase,
        use_cache=not args.no_cache,
    )


def run_dtype(args: argparse.Namespace, device: Any) -> Any:
    """The run dtype and training precision (perfpredict.hardware.precision.resolve_run_dtype), kept on ``args.run``."""
    from perfpredict.hardware.precision import resolve_run_dtype

    declared = None
    if not args.onnx:
        from perfpredict.compiler_hooks.hf_frontend import declared_dtype, raw_config

        declared = declared_dtype(raw_config(args.hf or args.config)[0])
    return resolve_run_dtype(declared, args.dtype, args.precision, args.training, device)


def model_from_args(args: argparse.Namespace) -> tuple[Any, str, Any, str]:
    """(device, phase, OpGraph, model name) the arguments name; the run dtype is kept on ``args.run``."""
    from perfpredict.hardware.devices import get_device

    device = get_device(args.device)  # fail fast, before a model is built
    phase = "training" if args.training else "inference"
    args.run = run_dtype(args, device)
    graph, name = graph_from_args(args, phase)
    return device, phase, graph, name
