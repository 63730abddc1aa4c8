"""The engine versions against vLLM's published performance posts (scored, never fitted; the posts are not shipped).

    python benchmarks/vllm_posts.py /work/.mirror/vllm-project+vllm-project.github.io/repo

The blog's repository (github.com/vllm-project/vllm-project.github.io) has no license file, so neither its text nor
its figures are committed here: this script reads the figures from the fetched copy given on the command line
(``fetch github:vllm-project/vllm-project.github.io``), and the result it writes holds our predictions, the
published figure each is scored against, and the error, citing the post. What is scored (each from the post's text):

- **v0.6.0 against v0.5.3** (blog.vllm.ai/2024/09/05/perf-update.html): throughput on ShareGPT with every request
  at once (500 prompts, 202 tokens in and 179 out on average; Llama 3 8B on one H100, 70B on four), behind the
  OpenAI server, v0.6.0 with ``--num-scheduler-steps 10``: the published ratios (2.7x and 1.8x). The TPOT ratios
  (5x and 2x) were measured at 32 requests/s ("TPOT measured at 32 QPS"; the mean TPOT): scored through the serving
  simulation (``perfpredict serve-sim``), each version behind its OpenAI server serving the same 500 requests,
  Poisson arrivals at 32/s (what vLLM's ``benchmark_serving --request-rate 32`` sends; the post names no arrival
  process) at the post's mean lengths, seed 0; 0.6 with 10 scheduler steps (its scheduling phases' host cost once
  per 10 steps; admission is still simulated every step, so multi-step's later admission is not).
- **multi-step scheduling** (+28% throughput, 70B on 4 x H100) and **asynchronous output processing** (8.7% less
  TPOT, the same), from the same post.
- **light load**: "Llama3 8B can generate 1 token every 13 ms under light load" (v0.5.x behind its server).
- **V1** (blog.vllm.ai/2025/01/27/v1-alpha-release.html): "up to 1.7x higher throughput compared to V0 (without
  multi-step scheduling)" on ShareGPT (Llama 3.1 8B, 3.3 70B); and "execution time on the GPU is as low as ~5ms"
  for Llama-8B on an H100.

The v0.5.3 profile (GPU 38%, API server 33%, scheduling 29%) sets the OpenAI server's cost per streamed token
(``benchmarks/engine_host_costs.py``): it is not scored here. ShareGPT's lengths are taken at their means (no
distribution is published with the post); the 70B figures use Llama-3-70B's config for Llama 3.x 70B.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import header, write_result  # noqa: E402

PERF = "_posts/2024-09-05-perf-update.md"
V1 = "_posts/2025-01-27-v1-alpha-release.md"
PERF_URL = "blog.vllm.ai/2024/09/05/perf-update.html"
V1_URL = "blog.vllm.ai/2025/01/27/v1-alpha-release.html"
SHAREGPT = (500, 202, 179)  # prompts, mean input tokens, mean output tokens (the post)
TPOT_QPS = 32.0  # the request rate of the post's TPOT figures ("TPOT measured at 32 QPS")


def read_post(repo: Path, path: str) -> str:
    """A post's markdown from the fetched copy (a git directory or a checkout)."""
    if (repo / "HEAD").is_file() and (repo / "objects").is_dir():
        return subprocess.run(["git", "--git-dir", str(repo), "show", f"HEAD:{path}"], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    return (repo / path).read_text()


def figures(perf: str, v1: str) -> dict[str, float]:
    """The published figures, found in the posts' text (a figure not found is left out)."""
    patterns = {
        "throughput_8b": (perf, r"([\d.]+)x higher throughput and [\d.]+x faster TPOT[^.]*Llama 8B"),
        "tpot_8b": (perf, r"[\d.]+x higher throughput and ([\d.]+)x faster TPOT[^.]*Llama 8B"),
        "throughput_70b": (perf, r"and ([\d.]+)x higher throughput and [\d.]+x less TPOT on Llama 70B"),
        "tpot_70b": (perf, r"and [\d.]+x higher throughput and ([\d.]+)x less TPOT on Llama 70B"),
        "multi_step_gain_pct": (perf, r"throughput of running Llama 70B models on 4xH100 by (\d+)%"),
        "async_output_tpot_pct": (perf, r"time-per-output-token of running Llama 70B models on 4xH100 by ([\d.]+)%"),
        "light_load_tpot_ms": (perf, r"Llama3 8B can generate 1 token every (\d+) ms under light load"),
        "v1_throughput": (v1, r"up to \*\*([\d.]+)x higher throughput\*\* compared to V0"),
        "v1_gpu_step_ms": (v1, r"execution time on the GPU is as low as ~(\d+)ms"),
    }
    out = {}
    for name, (text, pattern) in patterns.items():
        m = re.search(pattern, text)
        if m:
            out[name] = float(m.group(1))
    return out


def _run(model: str, tp: int, version: str, steps: int = 1, async_output=None, batch=None, lengths=SHAREGPT,
         frontend="openai-server"):  # fmt: skip
    from perfpredict.llm.generation_options import EngineOptions
    from perfpredict.llm.vllm_engine import predict_vllm

    n, prompt, new = lengths
    opts = EngineOptions(engine="vllm", version=version, frontend=frontend, scheduler_steps=steps,
                         async_output=async_output)  # fmt: skip
    return predict_vllm(model, device="H100-SXM", tp=tp, batch=batch or n, prompt_tokens=prompt, new_tokens=new,
                        sweep=False, options=opts)  # fmt: skip


def stream_tpot_ratio(model, tp: int, *, rate_per_s: float = TPOT_QPS, lengths=SHAREGPT, seed: int = 0,
                      device: str = "H100-SXM") -> float:  # fmt: skip
    """v0.5.3's mean TPOT over v0.6.0's (10 scheduler steps), each behind its OpenAI server, serving ``lengths``'
    requests (count, prompt and output tokens) arriving as a Poisson stream at ``rate_per_s``: the serving
    simulation's answer to the post's "TPOT measured at 32 QPS"."""
    from perfpredict.llm.serving import predict_serving

    n, prompt, new = lengths
    ask = dict(device=device, tp=tp, frontend="openai-server", rate_per_s=rate_per_s, arrival="poisson",
               num_requests=n, lengths="fixed", prompt_tokens=prompt, new_tokens=new, seed=seed)  # fmt: skip
    old = predict_serving(model, engine_version="0.5", **ask)
    current = predict_serving(model, engine_version="0.6", scheduler_steps=10, **ask)
    return old.tpot.mean_ms / current.tpot.mean_ms


def predictions() -> dict[str, tuple[float, str]]:
    """Our figure for each published one, with how it was computed."""
    out: dict[str, tuple[float, str]] = {}
    for size, model, tp in (("8b", "llama-3-8b", 1), ("70b", "llama-3-70b", 4)):
        old, new = _run(model, tp, "0.5"), _run(model, tp, "0.6", steps=10)
        out[f"throughput_{size}"] = (
            new.tokens_per_s / old.tokens_per_s,
            f"v0.6 (10 scheduler steps) / v0.5, {tp} x H100",
        )
        out[f"tpot_{size}"] = (
            stream_tpot_ratio(model, tp),
            f"serve-sim: v0.5 / v0.6 (10 scheduler steps) mean TPOT, both behind the server, {SHAREGPT[0]} requests "
            f"of {SHAREGPT[1]} + {SHAREGPT[2]} tokens, Poisson at {TPOT_QPS:g}/s, {tp} x H100",
        )
    one, ten = _run("llama-3-70b", 4, "0.6"), _run("llama-3-70b", 4, "0.6", steps=10)
    out["multi_step_gain_pct"] = ((ten.tokens_per_s / one.tokens_per_s - 1) * 100, "0.6: 10 scheduler steps / 1")
    sync = _run("llama-3-70b", 4, "0.6", async_output=False)
    out["async_output_tpot_pct"] = ((1 - one.tpot_mean_ms / sync.tpot_mean_ms) * 100, "0.6: TPOT with / without")
    light = _run("llama-3-8b", 1, "0.5", batch=4, lengths=(4, 202, 179))
    out["light_load_tpot_ms"] = (light.tpot_mean_ms, "0.5 behind its server, 4 requests at once")
    v0 = {m: _run(m, tp, "0.6") for m, tp in (("llama-3-8b", 1), ("llama-3-70b", 4))}
    v1 = {m: _run(m, tp, "0.8") for m, tp in (("llama-3-8b", 1), ("llama-3-70b", 4))}
    ratios = {m: v1[m].tokens_per_s / v0[m].tokens_per_s for m in v0}
    best = max(ratios, key=ratios.get)
    out["v1_throughput"] = (ratios[best], f"0.8 / 0.6 (no multi-step), the larger of 8B ({ratios['llama-3-8b']:.2f}) "
                            f"and 70B ({ratios['llama-3-70b']:.2f})")  # fmt: skip
    small = _run("llama-3-8b", 1, "0.8", batch=1, lengths=(1, 202, 179), frontend="offline")
    out["v1_gpu_step_ms"] = (small.decode_points[0].device_ms, "0.8, the GPU's part of a one-sequence decode step")
    return out


LABELS = {
    "throughput_8b": f"v0.6.0 / v0.5.3 throughput, Llama 3 8B, 1 x H100, ShareGPT at once ({PERF_URL})",
    "tpot_8b": f"v0.5.3 / v0.6.0 TPOT, Llama 3 8B, 32 QPS ({PERF_URL})",
    "throughput_70b": f"v0.6.0 / v0.5.3 throughput, Llama 3 70B, 4 x H100 ({PERF_URL})",
    "tpot_70b": f"v0.5.3 / v0.6.0 TPOT, Llama 3 70B, 32 QPS ({PERF_URL})",
    "multi_step_gain_pct": f"multi-step scheduling's throughput gain, %, 70B on 4 x H100 ({PERF_URL})",
    "async_output_tpot_pct": f"asynchronous output processing's TPOT cut, %, 70B on 4 x H100 ({PERF_URL})",
    "light_load_tpot_ms": f"TPOT under light load, ms, Llama 3 8B, 1 x H100 ({PERF_URL})",
    "v1_throughput": f"V1 / V0 throughput, 'up to' ({V1_URL})",
    "v1_gpu_step_ms": f"the GPU's time of a small step, ms, Llama 8B on an H100, '~' ({V1_URL})",
}


def score(published: dict[str, float], ours: dict[str, tuple[float, str]]) -> tuple[list[str], list[float]]:
    """The table's rows (each published figure against ours) and the absolute errors, in %, of those scored."""
    lines = ["| published figure | perfpredict | error | how |", "|---|---:|---:|---|"]
    errors = []
    for name, label in LABELS.items():
        if name not in published:
            lines.append(f"| {label} | - | - | not found in the post's text |")
            continue
        value, how = ours[name]
        err = (value / published[name] - 1) * 100
        errors.append(abs(err))
        lines.append(f"| {label} | {value:.3g} | {err:+.0f}% | {how} |")
    return lines, errors


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("repo", type=Path, help="the fetched vllm-project/vllm-project.github.io (git directory or clone)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "vllm_posts.md")
    args = p.parse_args()
    t0 = time.perf_counter()
    published = figures(read_post(args.repo, PERF), read_post(args.repo, V1))
    lines, errors = score(published, predictions())
    mape = sum(errors) / len(errors) if errors else float("nan")
    text = "\n".join([
        "# The engine versions against vLLM's performance posts", "",
        header(__file__, ["<the fetched vllm-project.github.io>"], seconds=time.perf_counter() - t0, packages=()), "",
        "The posts' figures are read from the fetched copy when this runs and not reproduced here: each row names its "
        "post, and the error is ours against it (target 15%). The posts' repository has no license file.", "",
        f"Scored: {len(errors)} figures, mean absolute error {mape:.0f}%, "
        f"{sum(e <= 15 for e in errors)} within 15%.", "", *lines, "",
    ])  # fmt: skip
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
