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
    from perfpredict.llm.decode_trace import CACHES
    from perfpredict.llm.generation import ENGINES
    from perfpredict.llm.weight_formats import FORMATS

    p = subparsers.add_parser(
        "generate",
        parents=parents or [],
        help="LLM generation: time to first token, per-token time, tokens/s, KV cache, fit (vLLM-class or HF)",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", metavar="ID", help="a shipped HuggingFace id or alias (see `perfpredict models`)")
    src.add_argument("--config", metavar="PATH", help="a HuggingFace config.json (or a folder holding one)")
    p.add_argument("--device", default=DEFAULT_DEVICE, help="catalog device name (see `perfpredict devices`)")
    p.add_argument("--prompt-tokens", type=_count("--prompt-tokens", 1), default=512)
    p.add_argument("--new-tokens", type=_count("--new-tokens", 1), default=128)
    p.add_argument("--batch", type=_count("--batch", 1), default=1, help="sequences generated together")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="vllm: a vLLM-class serving engine; hf: transformers' generate; auto (default): vllm for a decoder "
        "it covers on a GPU, hf when --mode, --cache, --quant-kernel or --attn-implementation is given",
    )
    p.add_argument("--tp", type=_count("--tp", 1), default=1, help="tensor-parallel GPUs (memory is then per GPU)")
    p.add_argument(
        "--pp",
        type=_count("--pp", 1),
        default=1,
        help="pipeline stages of --tp GPUs each (--engine vllm: its virtual engines; across nodes when a stage "
        "fills one)",
    )
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
        "--host",
        default=None,
        metavar="NAME",
        help="the host CPU that drives the GPU (its dispatch and kernel launches time each step): h100-server (a "
        "16-vCPU Xeon GPU server, the default), dev-vm, or calibrated (`perfpredict calibrate-host`'s; used by "
        "default once it exists)",
    )
    hf = p.add_argument_group("transformers' generate (--engine hf)")
    hf.add_argument(
        "--cache",
        choices=CACHES,
        default=None,
        help="HF cache object: dynamic (default) or static (the default, and the only one, with a CUDA-graph mode)",
    )
    hf.add_argument(
        "--mode", choices=("eager", "cuda_graph", "compiled", "compiled_cuda_graph"), default=None, help="default eager"
    )
    hf.add_argument(
        "--attn-implementation",
        choices=ATTN_IMPLEMENTATIONS,
        default=None,
        help="the attention transformers runs (default: the model's own, sdpa; flash_attention_2 is captured as one "
        "fused attention op); a vLLM-class engine runs its own FlashAttention-2",
    )
    hf.add_argument(
        "--quant-kernel",
        choices=("fused", "dequantize"),
        default=None,
        help="how int8/nf4/int4 weights are widened: fused dequant-GEMM, or dequantize-then-GEMM (default: as the "
        "common libraries do: bitsandbytes' nf4 fuses at batch 1 only, a prefill dequantizes)",
    )
    _engine_arguments(p)
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="answer again instead of reading the on-disk answer cache (and refresh it)",
    )
    p.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH ('-': stdout, nothing else)")
    p.add_argument("--html", metavar="PATH", help="write an HTML page with tokens/s against batch to PATH")
    p.set_defaults(func=run_generate)


def _engine_arguments(p: argparse.ArgumentParser) -> None:
    """vLLM's own settings (its v0.6 defaults when left out)."""
    v = p.add_argument_group("vLLM-class engine (--engine vllm; vLLM 0.6's defaults)")
    v.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F", help="default 0.9")
    v.add_argument("--block-size", type=int, choices=(8, 16, 32), default=None, help="KV block, tokens (16)")
    v.add_argument("--max-num-seqs", type=_count("--max-num-seqs", 1), default=None, help="default 256")
    v.add_argument("--max-num-batched-tokens", type=_count("--max-num-batched-tokens", 1), default=None)
    v.add_argument("--max-model-len", type=_count("--max-model-len", 1), default=None, help="default: the config's")
    v.add_argument(
        "--chunked-prefill",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="default: on for a model over 32K tokens of context without a sliding window",
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


def engine_config(args: argparse.Namespace):
    """The EngineConfig the vLLM settings ask for, or None when none was given."""
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
    }
    given = {k: v for k, v in fields.items() if v is not None}
    return EngineConfig(**given) if given else None


def run_generate(args: argparse.Namespace) -> int:
    from perfpredict.llm.answer_cache import cached_generation
    from perfpredict.llm.render_generation import print_generation, render_generation_html
    from perfpredict.render.text import terminal_console

    # a repeated question is read from the on-disk answer cache (llm/answer_cache.py), in well under a second
    report = cached_generation(
        args.hf or args.config,
        use_cache=not args.no_cache,
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        batch=args.batch,
        device=args.device,
        dtype=args.dtype,
        weights=args.weights,
        kv_dtype=args.kv_dtype,
        engine=args.engine,
        tp=args.tp,
        pp=args.pp,
        mode=args.mode,
        cache=args.cache,
        engine_config=engine_config(args),
        quant_kernel=args.quant_kernel,
        host=args.host,
        attn_implementation=args.attn_implementation,
    )
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
