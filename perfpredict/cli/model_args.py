"""The model and run the arguments name: the options every model command shares, and the Request they make.

Each run flag's ``dest`` is the name of a :class:`perfpredict.request.Request` field and its default is that
field's, so :func:`request_from_args` copies them across by name: a new run option needs its flag here and nothing
else in the CLI.
"""

from __future__ import annotations

import argparse
from typing import Any

from perfpredict.cli.args import DTYPE_CHOICES, non_negative_int, positive_float, positive_int
from perfpredict.compiler_hooks.attention_choice import ATTN_IMPLEMENTATIONS
from perfpredict.hardware.precision import FLOAT8_RECIPES, OPTIMIZER_IMPLS, OPTIMIZERS, PRECISIONS
from perfpredict.predictors.base import RUN_MODES
from perfpredict.request import AUTO, Request, default, field_names


def add_model_args(p: argparse.ArgumentParser, top_default: int) -> None:
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
    _run_flag(p, "--device", help="catalog device name (see `perfpredict devices`)")
    _run_flag(
        p,
        "--batch",
        type=positive_int("batch size"),
        help="batch size (default 1; an ONNX file: its dynamic batch dimension, else the file's own)",
    )
    _run_flag(
        p,
        "--seq",
        type=positive_int("sequence length"),
        help="sequence length for text models (default: the model's shipped default; an ONNX file: the dynamic "
        "second dimension of its (batch, seq) inputs)",
    )
    _run_flag(
        p,
        "--dtype",
        choices=DTYPE_CHOICES,
        help="weights and activations dtype (default: the config's torch_dtype, else float32; an ONNX file: its own; "
        "in training, the --precision's compute dtype)",
    )
    _run_flag(
        p,
        "--attn-implementation",
        choices=ATTN_IMPLEMENTATIONS,
        help="the attention transformers runs (default: the model's own, sdpa for most configs; eager materialises "
        "the scores; flash_attention_2 is captured as one fused attention op)",
    )
    _run_flag(
        p,
        "--model-class",
        help="the transformers class to build a config with, e.g. AutoModelForSequenceClassification or "
        "BertForPreTraining (default: the head the config declares if it is a deployed one, causal LM, "
        "classification; else the base model)",
    )
    p.add_argument("--training", action="store_true", help="predict a training step (fwd + bwd + optimizer)")
    _run_flag(
        p,
        "--precision",
        choices=tuple(PRECISIONS),
        help="training recipe (default on a GPU: amp-bf16, bf16 compute with fp32 master weights, or "
        "amp-fp16 where the GPU has no bf16; on a CPU: fp32; --dtype float32 means fp32)",
    )
    _run_flag(
        p,
        "--optimizer",
        choices=tuple(OPTIMIZERS),
        help="training optimizer (default adamw; its state bytes: see the docs' memory section)",
    )
    p.add_argument(
        "--tf32",
        action="store_true",
        help="let float32 matmuls use TF32 (torch.backends.cuda.matmul.allow_tf32; convolutions do by default)",
    )
    _run_flag(
        p,
        "--weights-built-in",
        choices=(*DTYPE_CHOICES, "none", AUTO),
        help="dtype the weights are built in before the cast to --dtype (auto, the default: a config or an ONNX "
        "file loads straight in --dtype, as from_pretrained(dtype=...) does, like 'none'; float32: "
        "Model(config).to(dtype))",
    )
    _run_flag(
        p,
        "--predictor",
        help="auto (default: two_timeline, the same model for every device), analytical, two_timeline, "
        "or a learned whole-model predictor where trained: xgboost, graphsage, gae_gnn",
    )
    _run_flag(
        p,
        "--mode",
        choices=RUN_MODES,
        help="how the step runs, for the two-timeline predictor: eager (default), cuda_graph, compiled "
        "(torch.compile), compiled_cuda_graph (torch.compile mode='reduce-overhead')",
    )
    _run_flag(
        p,
        "--host",
        metavar="NAME",
        help="the host CPU that drives the GPU (its dispatch and launches time an eager step): h100-server (a "
        "16-vCPU Xeon GPU server, the default), dev-vm, or calibrated (`perfpredict calibrate-host`'s; used by "
        "default once it exists)",
    )
    add_training_memory_args(p)
    _run_flag(p, "--max-latency-ms", type=positive_float, help="latency target for MIG advice")
    _run_flag(
        p,
        "--min-throughput",
        dest="min_throughput_per_s",
        type=positive_float,
        help="throughput target (samples/s) for MIG advice",
    )
    _run_flag(p, "--model-name", help="the name the report shows")
    _run_flag(
        p,
        "--grid-g-per-kwh",
        type=positive_float,
        help="grid carbon intensity in gCO2e/kWh (default: $PERFPREDICT_GRID_G_PER_KWH, else the world mean)",
    )
    _run_flag(
        p,
        "--workload-calls",
        type=positive_int("--workload-calls"),
        help="calls the carbon and cost figures cover (default: 1,000 inferences, or 1,000 training steps)",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="capture the model again instead of reading the on-disk graph cache (and refresh it)",
    )
    p.add_argument(
        "--top",
        type=top_count,
        default=top_default,
        metavar="N|all",
        help=f"per-op rows to show, the slowest first (default {top_default}; 'all': every op)",
    )


def top_count(text: str) -> int | None:
    """``--top``: a whole number, or "all" (None: every op)."""
    if text.strip().lower() == "all":
        return None
    try:
        return non_negative_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0 or 'all', got {text!r}") from None


def add_training_memory_args(p: argparse.ArgumentParser) -> None:
    """Training memory and fine-tuning (docs/parallel.md, "Memory, checkpointing and fine-tuning")."""
    g = p.add_argument_group("training memory and fine-tuning (with --training)")
    _run_flag(
        g,
        "--activation-checkpointing",
        metavar="POLICY",
        help="none, full (every block recomputes its forward in the backward), selective-op (save matmul and "
        "attention outputs, recompute the rest) or every-K (every K-th block); default: the model's own",
    )
    _run_flag(
        g, "--float8", choices=tuple(FLOAT8_RECIPES), help="float8 linears: tensorwise, rowwise (torchao), delayed (TE)"
    )
    _run_flag(g, "--optimizer-impl", choices=OPTIMIZER_IMPLS, help="torch.optim implementation (default: foreach)")
    _run_flag(g, "--offload-optimizer", action="store_true", help="ZeRO-Offload: optimizer state and step on the CPU")
    _run_flag(g, "--lora-rank", type=positive_int("--lora-rank"), help="fine-tune LoRA adapters of this rank (peft)")
    _run_flag(g, "--lora-targets", metavar="NAMES", help="modules that get adapters: q_proj,v_proj or all-linear")
    _run_flag(g, "--qlora", action="store_true", help="QLoRA: the frozen base in 4-bit NF4 (with --lora-rank)")
    _run_flag(g, "--power-limit", dest="power_limit_w", type=positive_float, metavar="W", help="board power cap (W)")


def _run_flag(p: Any, flag: str, dest: str | None = None, **options: Any) -> None:
    """A run flag: its ``dest`` names a Request field (``--max-latency-ms``: ``max_latency_ms``) and its default is
    that field's, so :func:`request_from_args` can copy every run option across by name."""
    dest = dest or flag.removeprefix("--").replace("-", "_")
    p.add_argument(flag, dest=dest, default=default(dest), **options)


def request_from_args(args: argparse.Namespace, **changes: Any) -> Request:
    """The Request the arguments make: every attribute named as a Request field, the model source, the phase
    (``--training``), the multi-GPU plan (``--dp/--tp/...``, where the command has them), and ``changes``."""
    from perfpredict.cli.parallel import plan_from_args
    from perfpredict.model_sources import HFSource, OnnxSource

    fields = {name: getattr(args, name) for name in field_names() if hasattr(args, name)}
    if args.onnx:
        source: Any = OnnxSource(args.onnx, tuple(args.input_shape or ()))
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
