"""``perfpredict generate``: time to first token, time per output token, tokens/s and memory of LLM generation."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.request import DEFAULT_DEVICE


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
    from perfpredict.compiler_hooks.attention_choice import ATTN_IMPLEMENTATIONS
    from perfpredict.llm.generation_options import EngineOptions, Generation, field_help
    from perfpredict.llm.weight_formats import FORMATS

    g, e = field_help(Generation), field_help(EngineOptions)
    p = subparsers.add_parser(
        "generate",
        parents=parents or [],
        help="LLM generation: time to first token, per-token time, tokens/s, KV cache, fit (serving engines or HF)",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", metavar="ID", help="a shipped HuggingFace id or alias (see `perfpredict models`)")
    src.add_argument("--config", metavar="PATH", help="a HuggingFace config.json (or a folder holding one)")
    p.add_argument("--device", default=DEFAULT_DEVICE, help=g["device"]["help"])
    p.add_argument("--prompt-tokens", type=_count("--prompt-tokens", 1), default=512, help=g["prompt_tokens"]["help"])
    p.add_argument("--new-tokens", type=_count("--new-tokens", 1), default=128, help=g["new_tokens"]["help"])
    p.add_argument("--batch", type=_count("--batch", 1), default=1, help=g["batch"]["help"])
    p.add_argument("--engine", choices=e["engine"]["choices"], default="auto", help=e["engine"]["help"])
    p.add_argument("--engine-version", dest="version", default=None, metavar="V", help=e["version"]["help"])
    p.add_argument("--frontend", choices=e["frontend"]["choices"], default="offline", help=e["frontend"]["help"])
    p.add_argument("--frontend-process", choices=e["frontend_process"]["choices"], default=None,
                   help=e["frontend_process"]["help"])  # fmt: skip
    p.add_argument("--tp", type=_count("--tp", 1), default=1, help=g["tp"]["help"])
    p.add_argument("--pp", type=_count("--pp", 1), default=1, help=g["pp"]["help"])
    p.add_argument("--dtype", choices=g["dtype"]["choices"], default=None, help=g["dtype"]["help"])
    p.add_argument("--weights", choices=tuple(FORMATS), default=None, help=g["weights"]["help"])
    p.add_argument("--kv-dtype", choices=g["kv_dtype"]["choices"], default=None, help=g["kv_dtype"]["help"])
    p.add_argument(
        "--host",
        default=None,
        metavar="NAME",
        help="the host CPU that drives the GPU (its dispatch and kernel launches time each step): h100-server (a "
        "16-vCPU Xeon GPU server, the default), dev-vm, or calibrated (`perfpredict calibrate-host`'s; used by "
        "default once it exists)",
    )
    hf = p.add_argument_group("transformers' generate (--engine hf)")
    hf.add_argument("--cache", choices=g["cache"]["choices"], default=None,
                    help="HF cache object: dynamic (default) or static (the default, and the only one, with a "
                    "CUDA-graph mode)")  # fmt: skip
    hf.add_argument("--mode", choices=g["mode"]["choices"], default=None, help="default eager")
    hf.add_argument(
        "--attn-implementation",
        choices=ATTN_IMPLEMENTATIONS,
        default=None,
        help="the attention transformers runs (default: the model's own, sdpa; flash_attention_2 is captured as one "
        "fused attention op); a serving engine runs its own kernels",
    )
    hf.add_argument(
        "--quant-kernel",
        choices=g["quant_kernel"]["choices"],
        default=None,
        help="how int8/nf4/int4 weights are widened: fused dequant-GEMM, or dequantize-then-GEMM (default: as the "
        "common libraries do: bitsandbytes' nf4 fuses at batch 1 only, a prefill dequantizes)",
    )
    _engine_arguments(p)
    _host_choice_arguments(p, e)
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="answer again instead of reading the on-disk answer cache (and refresh it)",
    )
    p.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH ('-': stdout, nothing else)")
    p.add_argument("--html", metavar="PATH", help="write an HTML page with tokens/s against batch to PATH")
    p.set_defaults(func=run_generate)


def _engine_arguments(p: argparse.ArgumentParser) -> None:
    """The serving engines' own settings (each version's defaults when left out)."""
    v = p.add_argument_group("serving engines (--engine vllm, sglang, trtllm, mii, llamacpp; their defaults)")
    v.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F",
                   help="the KV cache's share of memory (vLLM 0.9, SGLang 0.88, TensorRT-LLM 0.9 of what is free)")  # fmt: skip
    v.add_argument("--block-size", type=int, choices=(1, 8, 16, 32, 64, 128), default=None, help="KV block, tokens")
    v.add_argument("--max-num-seqs", type=_count("--max-num-seqs", 1), default=None, help="sequences in flight")
    v.add_argument("--max-num-batched-tokens", type=_count("--max-num-batched-tokens", 1), default=None)
    v.add_argument("--max-model-len", type=_count("--max-model-len", 1), default=None, help="default: the config's")
    v.add_argument(
        "--chunked-prefill",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="default: the version's (vLLM 0.6: on over 32K tokens of context without a sliding window; V1: on)",
    )
    v.add_argument("--enforce-eager", action="store_true", default=None, help="no CUDA graphs")
    v.add_argument(
        "--disable-custom-all-reduce",
        action="store_true",
        default=None,
        help="NCCL for every all-reduce (default: vLLM's custom all-reduce for messages under 8 MiB on NVLink)",
    )
    v.add_argument(
        "--enable-expert-parallel",
        action="store_true",
        default=None,
        help="a mixture of experts' experts split whole over the --tp GPUs, all-to-all dispatch and combine",
    )
    v.add_argument("--n-gpu-layers", type=_count("--n-gpu-layers", 0), default=None,
                   help="llama.cpp: layers on the GPU(s), the rest on the host CPU (default: all)")  # fmt: skip


def _host_choice_arguments(p: argparse.ArgumentParser, e: dict) -> None:
    """The options that move an engine's host work (``host_costs.HostChoices``)."""
    v = p.add_argument_group("where the engine's host work runs (vLLM 0.6 and V1)")
    v.add_argument("--num-scheduler-steps", dest="scheduler_steps", type=_count("--num-scheduler-steps", 1),
                   default=1, help=e["scheduler_steps"]["help"])  # fmt: skip
    v.add_argument("--async-output", action=argparse.BooleanOptionalAction, default=None,
                   help=e["async_output"]["help"])  # fmt: skip
    v.add_argument("--async-scheduling", action="store_true", default=False, help=e["async_scheduling"]["help"])


def engine_config(args: argparse.Namespace):
    """The EngineConfig the engine settings ask for, or None when none was given."""
    from perfpredict.llm.vllm_config import EngineConfig

    fields = {
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "block_size": args.block_size,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "max_model_len": args.max_model_len,
        "chunked_prefill": args.chunked_prefill,
        "enforce_eager": args.enforce_eager,
        "disable_custom_all_reduce": args.disable_custom_all_reduce,
        "enable_expert_parallel": args.enable_expert_parallel,
        "n_gpu_layers": args.n_gpu_layers,
    }
    given = {k: v for k, v in fields.items() if v is not None}
    return EngineConfig(**given) if given else None


def generation(args: argparse.Namespace):
    """The one Generation the flags ask (built once; everything below takes it whole)."""
    from perfpredict.llm.generation_options import EngineOptions, Generation

    engine = EngineOptions(engine=args.engine, version=args.version, frontend=args.frontend,
                           frontend_process=args.frontend_process, scheduler_steps=args.scheduler_steps,
                           async_output=args.async_output, async_scheduling=args.async_scheduling,
                           settings=engine_config(args))  # fmt: skip
    return Generation(prompt_tokens=args.prompt_tokens, new_tokens=args.new_tokens, batch=args.batch,
                      device=args.device, dtype=args.dtype, weights=args.weights, kv_dtype=args.kv_dtype, tp=args.tp,
                      pp=args.pp, mode=args.mode, cache=args.cache, quant_kernel=args.quant_kernel,
                      attn_implementation=args.attn_implementation, host=args.host, engine=engine)  # fmt: skip


def run_generate(args: argparse.Namespace) -> int:
    from perfpredict.llm.answer_cache import cached_generation
    from perfpredict.llm.render_generation import print_generation, render_generation_html
    from perfpredict.render.text import terminal_console

    # a repeated question is read from the on-disk answer cache (llm/answer_cache.py), in well under a second
    report = cached_generation(args.hf or args.config, generation(args), use_cache=not args.no_cache)
    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
    else:
        print_generation(report, terminal_console())
    for path, text in ((args.json, report.to_json() + "\n"), (args.html, None)):
        if path and path != "-":
            try:
                Path(path).write_text(text if text is not None else render_generation_html(report), encoding="utf-8")
            except OSError as err:
                raise InvalidInputError(f"cannot write {path!r}: {err.strerror or err}") from err
    return 0
