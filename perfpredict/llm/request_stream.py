"""The requests of a ``RequestStream``: arrival times, prompt lengths and output lengths, as arrays.

- **Arrivals**: ``poisson`` draws exponential gaps of mean 1/rate from a seeded generator (what vLLM's
  ``benchmark_serving --request-rate`` sends); ``uniform`` spaces them 1/rate apart; ``burst`` puts every request
  at t = 0 (``--request-rate inf``, and ``llm.generate``'s batch).
- **Lengths**: ``fixed``; ``file`` (a CSV with a header, or JSONL, of ``prompt_tokens`` and ``output_tokens`` per
  request, ``arrival_s`` optional to replay a trace); or ``sharegpt``, a parametric stand-in for the ShareGPT
  conversations serving benchmarks sample (no dataset is read):

  - prompt and output lengths are independent lognormals whose means are the ShareGPT means Kwon et al. report
    for vLLM's evaluation (SOSP 2023, "Efficient Memory Management for LLM Serving with PagedAttention", section
    6.1 and Fig. 11: 161.31 prompt and 337.99 output tokens on average, 8.4x and 5.8x Alpaca's 19.31 and 58.45);
  - the shape sigma = 1.0 (median = mean x e^-0.5) is an assumption: no spread was published with the means;
  - pairs are then filtered as vLLM's ``benchmark_serving`` filters ShareGPT (prompt and output at least 4
    tokens, prompt at most 1,024, prompt + output at most 2,048) and the model's ``max_model_len``: a rejected
    pair is drawn again, so the means of what is sent are lower than the published ones (the report gives them).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfpredict.core.errors import InvalidInputError

SHAREGPT_MEAN_PROMPT = 161.31  # Kwon et al. 2023, Fig. 11 (ShareGPT)
SHAREGPT_MEAN_OUTPUT = 337.99
SHAREGPT_SIGMA = 1.0  # assumed: see the module docstring
# vLLM benchmark_serving's ShareGPT filter
MIN_TOKENS, MAX_PROMPT, MAX_TOTAL = 4, 1024, 2048
PROMPT_COLUMNS = ("prompt_tokens", "prompt_len", "input_tokens", "input_len")
OUTPUT_COLUMNS = ("output_tokens", "new_tokens", "output_len")


@dataclass(frozen=True)
class Requests:
    """One stream, request by request (sorted by arrival): seconds, prompt tokens, output tokens."""

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    lengths: str  # how the lengths were chosen, for the report's assumptions
    of: int | None = None  # the stream's requests this is a share of (``every``); None: the whole stream

    def __len__(self) -> int:
        return len(self.prompt)

    def every(self, n: int, start: int = 0) -> Requests:
        """Every ``n``-th request from ``start``: one of ``n`` virtual engines' share when each request goes to the
        least-loaded one (in turn, for requests alike)."""
        if n == 1:
            return self
        pick = slice(start, None, n)
        return Requests(self.arrival_s[pick], self.prompt[pick], self.output[pick], self.lengths, len(self))


def sample(stream, max_model_len: int) -> Requests:
    """The requests ``stream`` (a ``serving_options.RequestStream``) sends to an engine of ``max_model_len``."""
    rng = np.random.default_rng(stream.seed)
    arrival = None
    if stream.lengths == "fixed":
        prompt = np.full(stream.num_requests, stream.prompt_tokens)
        output = np.full(stream.num_requests, stream.new_tokens)
        what = f"fixed: {stream.prompt_tokens} prompt and {stream.new_tokens} output tokens"
    elif stream.lengths == "sharegpt":
        prompt, output = sharegpt_lengths(stream.num_requests, rng, max_model_len)
        what = (
            f"ShareGPT-like lognormals (means {SHAREGPT_MEAN_PROMPT:g} and {SHAREGPT_MEAN_OUTPUT:g} published, "
            f"sigma {SHAREGPT_SIGMA:g} assumed, vLLM's benchmark filter): sent means {prompt.mean():.0f} prompt "
            f"and {output.mean():.0f} output tokens"
        )
    else:
        prompt, output, arrival = read_lengths_file(Path(stream.lengths_file))
        what = f"{len(prompt):,} requests from {stream.lengths_file}" + (
            " with their arrival times" * (arrival is not None)
        )
    too_long = np.flatnonzero(prompt + output > max_model_len)
    if len(too_long):
        i = int(too_long[0])
        raise InvalidInputError(
            f"request {i}: prompt {prompt[i]} + output {output[i]} tokens is beyond max_model_len {max_model_len} "
            f"({len(too_long)} such request(s)); the engine would refuse it: shorten them or raise --max-model-len"
        )
    if arrival is None:
        arrival = arrivals(stream, len(prompt), rng)
    order = np.argsort(arrival, kind="stable")
    return Requests(arrival[order].astype(float), prompt[order].astype(np.int64), output[order].astype(np.int64), what)


def arrivals(stream, n: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival seconds of ``n`` requests; the first at t = 0 (the clock starts with the load)."""
    kind = stream.resolved_arrival
    if kind == "burst":
        return np.zeros(n)
    if kind == "uniform":
        return np.arange(n) / stream.rate_per_s
    gaps = rng.exponential(1.0 / stream.rate_per_s, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def sharegpt_lengths(n: int, rng: np.random.Generator, max_model_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, output) pairs from the ShareGPT-like lognormals, filtered as the module docstring says."""
    mu = [np.log(m) - SHAREGPT_SIGMA**2 / 2 for m in (SHAREGPT_MEAN_PROMPT, SHAREGPT_MEAN_OUTPUT)]
    total = min(MAX_TOTAL, max_model_len)
    prompt, output = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    while len(prompt) < n:
        p = np.rint(rng.lognormal(mu[0], SHAREGPT_SIGMA, size=2 * n)).astype(np.int64)
        o = np.rint(rng.lognormal(mu[1], SHAREGPT_SIGMA, size=2 * n)).astype(np.int64)
        keep = (p >= MIN_TOKENS) & (o >= MIN_TOKENS) & (p <= min(MAX_PROMPT, total - MIN_TOKENS)) & (p + o <= total)
        prompt, output = np.concatenate([prompt, p[keep]]), np.concatenate([output, o[keep]])
    return prompt[:n], output[:n]


def read_lengths_file(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(prompt, output, arrival seconds or None) from a CSV with a header or a JSONL file (one object a line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InvalidInputError(f"cannot read --lengths-file {str(path)!r}: {err.strerror or err}") from err
    if path.suffix.lower() in (".jsonl", ".json"):
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as err:
            raise InvalidInputError(f"--lengths-file {str(path)!r} is not JSONL (one object a line): {err}") from err
    else:
        rows = list(csv.DictReader(text.splitlines()))
    if not rows or not all(isinstance(r, dict) for r in rows):
        raise InvalidInputError(f"--lengths-file {str(path)!r} holds no requests (a CSV with a header, or JSONL)")
    prompt = _column(rows, PROMPT_COLUMNS, path)
    output = _column(rows, OUTPUT_COLUMNS, path)
    bad = np.flatnonzero((prompt < 1) | (output < 1))
    if len(bad):
        raise InvalidInputError(f"--lengths-file {str(path)!r}, request {int(bad[0])}: lengths must be at least 1")
    arrival = _column(rows, ("arrival_s",), path, float) if "arrival_s" in rows[0] else None
    if arrival is not None:
        arrival = arrival - arrival.min()
    return prompt, output, arrival


def _column(rows: list[dict], names: tuple[str, ...], path: Path, kind=int) -> np.ndarray:
    name = next((n for n in names if n in rows[0]), None)
    if name is None:
        raise InvalidInputError(
            f"--lengths-file {str(path)!r} has no column {names[0]!r} (or {', '.join(names[1:]) or 'alias'}); "
            f"its columns: {', '.join(map(str, rows[0]))}"
        )
    try:
        return np.array([kind(float(r[name])) for r in rows], dtype=float if kind is float else np.int64)
    except (KeyError, TypeError, ValueError) as err:
        raise InvalidInputError(f"--lengths-file {str(path)!r}: column {name!r} must be numbers ({err})") from err
