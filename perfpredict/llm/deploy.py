"""``search_deployments``: ``deploy_search`` on the real engine (``perfpredict deploy``, the web page's view).

Each candidate is a ``serving.build`` of the model on its GPUs with its max batch and engine (a serving engine, with
or without its version: ``vllm``, ``vllm-0.6``, ``sglang``; ``engine_versions.parse_engine``), the engine's other
settings, numerics, frontend and host as the question gives them, priced from the catalog (``hardware.cost``) unless
a price is given.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from perfpredict.llm.deploy_search import DEFAULT_MAX_REPLICAS, Candidate, DeployReport, Grid, Replica, search
from perfpredict.llm.serving_options import Serving


def engine_backend(model: Any, base: Serving):
    """A candidate's ``Replica``: ``base``'s question on the candidate's device, tp and max batch."""
    from perfpredict.hardware import cost
    from perfpredict.llm import serving
    from perfpredict.llm.engine_versions import parse_engine
    from perfpredict.llm.vllm_config import EngineConfig

    def replica(c: Candidate) -> Replica:
        version = parse_engine(c.engine)
        config = dataclasses.replace(base.engine_config or EngineConfig(), max_num_seqs=c.max_num_seqs)
        question = dataclasses.replace(base, device=c.device, tp=c.tp, pp=c.pp, engine_config=config,
                                       engine=version.engine, engine_version=version.version)  # fmt: skip
        built = serving.build(model, question)
        price = base.price_usd_per_hour
        if price is None:
            price = cost.price_usd_per_hour(built.setup.model.device)
        return Replica(built.sim, built.max_model_len, price, built.setup.pp)

    return replica


def search_deployments(model: Any, grid: Grid | None = None, serving: Serving | None = None, *,
                       max_replicas: int = DEFAULT_MAX_REPLICAS, **options: Any) -> DeployReport:  # fmt: skip
    """The cheapest deployment of ``model`` that carries the load within the SLO: ``grid`` (a ``deploy_search.Grid``:
    devices, tps, pps, max_num_seqs, engines; default: H100-SXM, A100-80GB, L40S-class GPUs of the catalog at tp 1-8)
    and the load and SLO as ``predict_serving`` takes them (``rate_per_s``, ``lengths``, ``num_requests``,
    ``ttft_ms``, ``tpot_ms``, ``percentile``, ...)."""
    from perfpredict.llm.decoder_spec import spec_from

    s = serving.but(**options) if serving is not None else Serving.of(**options)
    grid = grid or Grid(devices=default_devices())
    report = search(engine_backend(model, s), grid.candidates(), s.stream, s.slo,
                    model_name=spec_from(model).name, max_replicas=max_replicas)  # fmt: skip
    if s.prefix_cache is not None or s.speculative is not None:
        notes = "prefix caching and speculative decoding as given apply to every candidate"
        report = dataclasses.replace(report, notes=(*report.notes, notes))
    return report


def cached_search(model: Any, grid: Grid, serving: Serving, *, max_replicas: int = DEFAULT_MAX_REPLICAS,
                  use_cache: bool = True) -> DeployReport:  # fmt: skip
    """``search_deployments``, read from the on-disk answer cache where the same search was run before under the
    same code, devices and host profile (``serving_cache``)."""
    from perfpredict.llm import serving_cache

    cache_key = serving_cache.key("deploy", model, serving, devices=grid.devices, grid=grid, max_replicas=max_replicas)
    search = lambda: search_deployments(model, grid, serving, max_replicas=max_replicas)
    return serving_cache.cached(cache_key, search, DeployReport.from_dict, use_cache)


def default_devices() -> tuple[str, ...]:
    """The catalog's data-centre GPUs with a price: the grid when none is named."""
    from perfpredict.hardware.devices import list_devices

    wanted = ("H100-SXM", "A100-80GB", "L40S", "L4", "A10G")
    names = {d.name for d in list_devices() if d.kind == "gpu" and d.price_usd_per_hour is not None}
    return tuple(n for n in wanted if n in names) or tuple(sorted(names))[:3]
