"""The model and run the arguments name: the options every model command shares, and the Request they make.

Each run flag's ``dest`` is the name of a :class:`perfpredict.request.Request` field and its default is that
field's, so :func:`request_from_args` copies them across by name: a new run option needs its flag here and nothing
else in the CLI.
"""

from __future__ import annotations

import argparse
from typing import Any

from perfpredict.cli.args import DTYPE_CHOICES, non_negative_int, positive_float, positive_int
from perfpredict.hardware.precision import OPTIMIZERS, PRECISIONS
from perfpredict.predictors.base import RUN_MODES
from perfpredict.request import AUTO, Request, default, field_names


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
    p.add_argument("--device", default=default("device"), help="catalog device name (see `perfpredict devices`)")
    p.add_argument("--batch", type=positive_int("batch size"), default=default("batch"), help="batch size (default 1)")
    p.add_argument(
        "--seq",
        type=positive_int("sequence length"),
        default=default("seq"),
        help="sequence length for text models (default: the model's shipped default)",
    )
    p.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default=default("dtype"),
        help="weights and activations dtype (default: the config's torch_dtype, else float32; in "
        "training, the --precision's compute dtype)",
    )
    p.add_argument("--training", action="store_true", help="predict a training step (fwd + bwd + optimizer)")
    p.add_argument(
        "--precision",
        choices=tuple(PRECISIONS),
        default=default("precision"),
        help="training recipe (default on a GPU: amp-bf16, bf16 compute with fp32 master weights, or "
        "amp-fp16 where the GPU has no bf16; on a CPU: fp32; --dtype float32 means fp32)",
    )
    p.add_argument(
        "--optimizer",
        choices=tuple(OPTIMIZERS),
        default=default("optimizer"),
        help="training optimizer (default adamw; its state bytes: see the docs' memory section)",
    )
    p.add_argument(
        "--tf32",
        action="store_true",
        help="let float32 matmuls use TF32 (torch.backends.cuda.matmul.allow_tf32; convolutions do by default)",
    )
    p.add_argument(
        "--weights-built-in",
        choices=(*DTYPE_CHOICES, "none", AUTO),
        default=default("weights_built_in"),
        help="dtype the weights are built in before the cast to --dtype (auto, the default: a config or an ONNX "
        "file loads straight in --dtype, as from_pretrained(dtype=...) does, like 'none'; float32: "
        "Model(config).to(dtype))",
    )
    p.add_argument(
        "--predictor",
        default=default("predictor"),
        help="auto (default: two_timeline, the same model for every device), analytical, two_timeline, "
        "or a learned whole-model predictor where trained: xgboost, graphsage, gae_gnn",
    )
    p.add_argument(
        "--mode",
        choices=RUN_MODES,
        default=default("mode"),
        help="how the step runs, for the two-timeline predictor: eager (default), cuda_graph, compiled "
        "(torch.compile), compiled_cuda_graph (torch.compile mode='reduce-overhead')",
    )
    p.add_argument(
        "--host",
        default=default("host"),
        metavar="NAME",
        help="the host CPU that drives the GPU (its dispatch and launches time an eager step): h100-server (a "
        "16-vCPU Xeon GPU server, the default), dev-vm, or calibrated (`perfpredict calibrate-host`'s; used by "
        "default once it exists)",
    )
    p.add_argument(
        "--max-latency-ms", type=positive_float, default=default("max_latency_ms"), help="latency target for MIG advice"
    )
    p.add_argument(
        "--min-throughput",
        dest="min_throughput_per_s",
        type=positive_float,
        default=default("min_throughput_per_s"),
        help="throughput target (samples/s) for MIG advice",
    )
    p.add_argument("--model-name", default=default("model_name"), help="the name the report shows")
    p.add_argument(
        "--grid-g-per-kwh",
        type=positive_float,
        default=default("grid_g_per_kwh"),
        help="grid carbon intensity in gCO2e/kWh (default: $PERFPREDICT_GRID_G_PER_KWH, else the world mean)",
    )
    p.add_argument(
        "--workload-calls",
        type=positive_int("--workload-calls"),
        default=default("workload_calls"),
        help="calls the carbon and cost figures cover (default: 1,000 inferences, or 1,000 training steps)",
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


def request_from_args(args: argparse.Namespace, **changes: Any) -> Request:
    """The Request the arguments make: every attribute named as a Request field, the model source, the phase
    (``--training``), the multi-GPU plan (``--dp/--tp/...``, where the command has them), and ``changes``."""
    from perfpredict.cli.parallel import plan_from_args
    from perfpredict.model_sources import HFSource, OnnxSource

    fields = {name: getattr(args, name) for name in field_names() if hasattr(args, name)}
    if args.onnx:
        source: Any = OnnxSource(args.onnx, tuple(args.input_shape or ()))
        fields.update(batch=None, seq=None)  # NB: the file's own shapes; --batch and --seq size a config only
    else:
        source = HFSource(args.hf or args.config, use_cache=not args.no_cache)
    fields.update(
        source=source,
        phase="training" if args.training else "inference",
        weights_built_in=None if args.weights_built_in == "none" else args.weights_built_in,
        parallel=plan_from_args(args),
        **changes,
    )
    return Request.of(**fields)
