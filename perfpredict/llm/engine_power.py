"""A serving engine's power per GPU over a run, from the GPU's power model (``hardware.power_draw``).

The GPU is busy the share of the wall time its kernels run (the rest it waits for the host, or between requests),
at the activity of a prefill step in the time it prefills and of a decode step at the middle context in the time
it decodes; while a tensor-parallel rank waits in its collectives it draws NCCL's activity. ``generate``'s run
(``vllm_engine``) and ``serve-sim``'s stream (``serving``) both ask :func:`busy_power_w`.
"""

from __future__ import annotations

from typing import Any


def busy_power_w(s: Any, *, decode_gpu_s: float, prefill_gpu_s: float, wall_s: float, running: int, context: int,
                 prompt: int) -> float:  # fmt: skip
    """One GPU's mean power over ``wall_s`` seconds of which its kernels ran ``decode_gpu_s`` in decode steps of
    ``running`` sequences at ``context`` tokens and ``prefill_gpu_s`` in prefills of ``prompt``-token prompts
    (``s``: a ``vllm_engine.Setup``)."""
    from perfpredict.hardware.power_draw import COMM_ACTIVITY, gpu_power_w, mean_activity

    running = max(1, running)
    decode_gpu = s.costs.decode_s(running, running * context, context)
    decode_comm = s.costs.collectives_s(running, running)
    chunk = max(1, min(prompt, s.model.engine.max_num_batched_tokens))
    prefill_gpu = s.costs.prefill_s([(chunk, chunk)])
    prefill_comm = s.costs.collectives_s(chunk, 1)
    decode_share = 1 - decode_comm / decode_gpu if decode_gpu else 1.0
    prefill_share = 1 - prefill_comm / prefill_gpu if prefill_gpu else 1.0
    parts = [
        (decode_gpu_s * decode_share, s.costs.activity(running, 1, context, decode_gpu - decode_comm)),
        (prefill_gpu_s * prefill_share, s.costs.activity(1, chunk, chunk, prefill_gpu - prefill_comm)),
        (decode_gpu_s * (1 - decode_share) + prefill_gpu_s * (1 - prefill_share), COMM_ACTIVITY),
    ]
    busy = sum(p for p, _ in parts)
    return gpu_power_w(s.model.device, busy / wall_s if wall_s else 0.0, mean_activity(parts))


def run_power_w(s: Any, trace: Any, running: int, prompt: int, new: int) -> float:
    """One GPU's mean power over a scheduler's run (``scheduler.Trace``) of ``running`` sequences decoding together,
    ``prompt`` tokens in and ``new`` out."""
    return busy_power_w(s, decode_gpu_s=trace.decode_gpu_s, prefill_gpu_s=trace.prefill_gpu_s, wall_s=trace.e2e_s,
                        running=running, context=prompt + new // 2, prompt=prompt)  # fmt: skip
