"""``perfpredict generate``: time to first token, time per output token, tokens/s and memory of LLM generation."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perfpredict.errors import InvalidInputError


def _count(what: str, minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"{what} must be at least {minimum}, got {value}"
                + ("; generate at least one token" if what == "--new-tokens" else "")
            )
        return value

    return parse


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    from perfpredict.llm.decode_trace import CACHES
    from perfpredict.llm.weight_formats import FORMATS

    p = subparsers.add_parser(
        "generate",
        parents=parents or [],
        help="LLM generation: time to first token, per-token time, tokens/s, KV cache, fit",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", metavar="ID", help="a shipped HuggingFace id or alias (see `perfpredict models`)")
    src.add_argument("--config", metavar="PATH", help="a HuggingFace config.json (or a folder holding one)")
    p.add_argument("--device", default="H100-SXM", help="catalog device name (see `perfpredict devices`)")
    p.add_argument("--prompt-tokens", type=_count("--prompt-tokens", 1), default=512)
    p.add_argument("--new-tokens", type=_count("--new-tokens", 1), default=128)
    p.add_argument("--batch", type=_count("--batch", 1), default=1, help="sequences generated together")
    p.add_argument(
        "--dtype",
        choices=("bfloat16", "float16", "float32"),
        default=None,
        help="compute dtype (default: the config's torch_dtype, else bf16 where the device has it)",
    )
    p.add_argument(
        "--weights",
        choices=tuple(FORMATS),
        default=None,
        help="weight format of the layers (default: the compute dtype); see the docs for each route",
    )
    p.add_argument(
        "--kv-dtype",
        choices=("bfloat16", "float16", "float32", "float8_e4m3fn"),
        default=None,
        help="KV cache dtype (default: the compute dtype)",
    )
    p.add_argument(
        "--cache",
        choices=CACHES,
        default="dynamic",
        help="HF cache object: dynamic (generate's default) or static (preallocated)",
    )
    p.add_argument("--mode", choices=("eager", "cuda_graph", "compiled", "compiled_cuda_graph"), default="eager")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH ('-': stdout, nothing else)")
    p.add_argument("--html", metavar="PATH", help="write an HTML page with tokens/s against batch to PATH")
    p.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from perfpredict.llm.generation import predict_generation
    from perfpredict.llm.render_generation import print_generation, render_generation_html

    report = predict_generation(
        args.hf or args.config,
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        batch=args.batch,
        device=args.device,
        dtype=args.dtype,
        weights=args.weights,
        kv_dtype=args.kv_dtype,
        mode=args.mode,
        cache=args.cache,
    )
    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
    else:
        print_generation(report, Console(highlight=False, width=None if sys.stdout.isatty() else 120))
    for path, text in ((args.json, report.to_json() + "\n"), (args.html, None)):
        if path and path != "-":
            try:
                Path(path).write_text(text if text is not None else render_generation_html(report), encoding="utf-8")
            except OSError as err:
                raise InvalidInputError(f"cannot write {path!r}: {err.strerror or err}") from err
    return 0
