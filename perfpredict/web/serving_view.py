"""The web page's serving views: "Serve under load" (``perfpredict serve-sim``) and "Choose a deployment"
(``perfpredict deploy``), each a tab under the comparison.

Each view's handler takes the page's fields by the names of its parameters (the tab lists them once, from the
signature, as the comparison does), builds the same ``Serving`` value the CLI builds, and answers with HTML: the
tables the terminal shows, and for the deployment the frontier of cost per 1M tokens against TPOT. A field at 0 or
"default" is the option left out. Errors are one line in the page.
"""

from __future__ import annotations

import inspect
import tempfile
from html import escape
from pathlib import Path
from typing import Any

from perfpredict.request import DEFAULT_DEVICE

DEPLOY_DEVICES = ("H100-SXM", "A100-80GB", "L40S", "L4")
TPS = ("1", "2", "4", "8")


#: the page's field -> the ``Serving.of`` keyword it fills (the engine's two settings go to its EngineConfig)
PAGE_FIELDS = {
    "device": "device", "tp": "tp", "rate": "rate_per_s", "arrival": "arrival", "num_requests": "num_requests",
    "seed": "seed", "lengths": "lengths", "prompt_tokens": "prompt_tokens", "new_tokens": "new_tokens",
    "lengths_file": "lengths_file", "ttft_ms": "ttft_ms", "tpot_ms": "tpot_ms", "percentile": "percentile",
    "prefix_tokens": "shared_tokens", "prefix_hit_rate": "hit_rate", "speculative": "method",
    "spec_tokens": "tokens", "acceptance_rate": "acceptance_rate", "draft_model": "draft_model",
    "engine": "engine", "engine_version": "engine_version", "frontend": "frontend",
}  # fmt: skip
#: the deployment tab's engine axis (``deploy_search.Grid.engines``, the CLI's ``--engines``) by default
DEPLOY_ENGINES = "vllm"
MAX_LENGTHS_FILE_BYTES = 16 << 20


def build(gr: Any, models: list[str], devices: list[str]) -> None:
    """The two tabs, inside the page's Blocks."""
    with gr.Tabs():
        with gr.Tab("Serve under load", elem_id="serve-sim-tab"):
            ui: dict[str, Any] = {}
            _source_fields(gr, ui, "sim")
            with gr.Row():
                ui["device"] = gr.Dropdown(devices, value=DEFAULT_DEVICE, label="device", elem_id="sim_device")
                ui["tp"] = gr.Number(value=1, precision=0, minimum=1, label="tp", elem_id="sim_tp")
                ui["max_num_seqs"] = gr.Number(value=256, precision=0, minimum=1, label="max batch (max_num_seqs)")
                ui["chunked_prefill"] = gr.Radio(["default", "on", "off"], value="default", label="chunked prefill")
            _engine_fields(gr, ui, "sim", grid=False)
            _load_fields(gr, ui, "sim", num_requests=1000)
            _option_fields(gr, ui, models)
            _answer_button(gr, ui, "Simulate", "sim", serve_sim_answer)
        with gr.Tab("Choose a deployment", elem_id="deploy-tab"):
            ui = {}
            _source_fields(gr, ui, "deploy")
            with gr.Row():
                choices = [d for d in DEPLOY_DEVICES if d in devices]
                ui["devices"] = gr.CheckboxGroup(devices, value=choices, label="GPUs", elem_id="deploy_devices")
                ui["tps"] = gr.CheckboxGroup(list(TPS), value=list(TPS), label="tp", elem_id="deploy_tps")
                ui["max_num_seqs"] = gr.Textbox(value="256", label="max batch (max_num_seqs), comma-separated")
            _engine_fields(gr, ui, "deploy", grid=True)
            _load_fields(gr, ui, "deploy", num_requests=300)
            _option_fields(gr, ui, models)
            _answer_button(gr, ui, "Search", "deploy", deploy_answer)


def _answer_button(gr: Any, ui: dict, text: str, prefix: str, handler) -> None:
    """The button, the answer's three outputs, and the handler given the fields its parameters name."""
    go = gr.Button(text, variant="primary", elem_id=f"{prefix}_go")
    outputs = [
        gr.HTML(elem_id=f"{prefix}_message"),
        gr.HTML(elem_id=f"{prefix}_answer"),
        gr.File(file_count="multiple"),
    ]
    go.click(handler, [ui[n] for n in inspect.signature(handler).parameters], outputs)


def _source_fields(gr: Any, ui: dict, prefix: str) -> None:
    from perfpredict.compiler_hooks.hf_frontend import known_models

    with gr.Row():
        ui["model"] = gr.Dropdown(known_models(), value="llama-2-7b", label="shipped decoder LLM",
                                  allow_custom_value=True, elem_id=f"{prefix}_model")  # fmt: skip
        ui["upload"] = gr.File(label="or upload a config.json", file_types=[".json"], elem_id=f"{prefix}_upload")


def _engine_fields(gr: Any, ui: dict, prefix: str, grid: bool) -> None:
    """The engine, its version and its frontend (``Serving.engine``, ``engine_version``, ``frontend``, as
    ``serve-sim --engine --engine-version --frontend`` take them); the deployment tab's engines are an axis of its
    grid, each named with or without its version (``deploy --engines``), the frontend on every candidate."""
    from perfpredict.llm.engine_versions import SERVING_ENGINES
    from perfpredict.llm.host_costs import FRONTENDS

    with gr.Row():
        if grid:
            ui["engines"] = gr.Textbox(value=DEPLOY_ENGINES, elem_id=f"{prefix}_engines",
                                       label="engines, comma-separated, each with or without its version "
                                       "(vllm, vllm-0.6, sglang, trtllm, mii, llamacpp)")  # fmt: skip
        else:
            ui["engine"] = gr.Dropdown(list(SERVING_ENGINES), value="vllm", label="engine", elem_id=f"{prefix}_engine")
            ui["engine_version"] = gr.Textbox(value="default", label="engine version (default: its current one)",
                                              elem_id=f"{prefix}_engine_version")  # fmt: skip
        ui["frontend"] = gr.Radio(list(FRONTENDS), value="offline", label="frontend", elem_id=f"{prefix}_frontend")


def _load_fields(gr: Any, ui: dict, prefix: str, num_requests: int) -> None:
    from perfpredict.llm.serving_options import ARRIVALS, LENGTHS

    with gr.Row():
        ui["rate"] = gr.Number(value=10, label="requests/s (0: all at t = 0)", elem_id=f"{prefix}_rate")
        ui["arrival"] = gr.Radio([a for a in ARRIVALS if a != "burst"], value="poisson", label="arrivals")
        ui["num_requests"] = gr.Number(value=num_requests, precision=0, minimum=1, label="requests")
        ui["seed"] = gr.Number(value=0, precision=0, minimum=0, label="seed")
    with gr.Row():
        ui["lengths"] = gr.Radio(list(LENGTHS), value="sharegpt", label="lengths", elem_id=f"{prefix}_lengths")
        ui["prompt_tokens"] = gr.Number(value=512, precision=0, minimum=1, label="prompt tokens (fixed)")
        ui["new_tokens"] = gr.Number(value=128, precision=0, minimum=1, label="output tokens (fixed)")
        ui["lengths_file"] = gr.File(label="lengths file (CSV or JSONL)", file_types=[".csv", ".jsonl"])
    with gr.Row():
        ui["ttft_ms"] = gr.Number(value=2000, label="TTFT target, ms (0: none)", elem_id=f"{prefix}_ttft")
        ui["tpot_ms"] = gr.Number(value=100, label="TPOT target, ms (0: none)", elem_id=f"{prefix}_tpot")
        ui["percentile"] = gr.Number(value=90, label="at percentile")


def _option_fields(gr: Any, ui: dict, models: list[str]) -> None:
    with gr.Row():
        ui["prefix_tokens"] = gr.Number(value=0, precision=0, minimum=0, label="shared prefix tokens (0: none)")
        ui["prefix_hit_rate"] = gr.Number(value=0, label="prefix hit rate (0: all carry it / no caching)")
    with gr.Row():
        ui["speculative"] = gr.Dropdown(["off", "ngram", "draft"], value="off", label="speculative decoding")
        ui["spec_tokens"] = gr.Number(value=5, precision=0, minimum=1, label="k, tokens proposed a step")
        ui["acceptance_rate"] = gr.Number(value=0, label="acceptance rate (0: the method's default)")
        ui["draft_model"] = gr.Dropdown(models, value=None, label="draft model", allow_custom_value=True)


def _source(model: Any, upload: Any) -> Any:
    """An uploaded config's fields, or a shipped id (never a path on the server's disk)."""
    from perfpredict.compiler_hooks.hf_frontend import resolve_id
    from perfpredict.core.errors import InvalidInputError
    from perfpredict.web.compare import config_from_upload

    if upload:
        return config_from_upload(_path(upload).read_bytes())
    if not model or resolve_id(model) is None:
        raise InvalidInputError(f"{model!r} is not a shipped model id; upload its config.json instead")
    return model


def _path(upload: Any) -> Path:
    return Path(upload if isinstance(upload, str) else upload.name)


def serving_fields(page: dict[str, Any]) -> dict[str, Any]:
    """The ``Serving.of`` keywords the page's fields ask for (0, "", "off", "default": the option left out)."""
    from perfpredict.core.errors import InvalidInputError
    from perfpredict.llm.vllm_config import EngineConfig

    given = {PAGE_FIELDS[k]: v for k, v in page.items() if k in PAGE_FIELDS and v not in (None, "", 0, "off")}
    if str(given.get("engine_version", "")).strip().lower() in ("", "default"):
        given.pop("engine_version", None)  # the engine's current version
    for name in ("tp", "num_requests", "seed", "prompt_tokens", "new_tokens", "shared_tokens", "tokens"):
        if name in given:
            given[name] = int(given[name])
    if page.get("seed") == 0:
        given["seed"] = 0
    if "rate_per_s" not in given:
        given.pop("arrival", None)  # no rate: all at t = 0
    if given.get("lengths") == "file":
        if "lengths_file" not in given:
            raise InvalidInputError("lengths 'file' needs a lengths file (CSV or JSONL) uploaded")
        path = _path(given["lengths_file"])
        if path.stat().st_size > MAX_LENGTHS_FILE_BYTES:
            raise InvalidInputError(f"the lengths file is over {MAX_LENGTHS_FILE_BYTES >> 20} MiB")
        given["lengths_file"] = str(path)
    else:
        given.pop("lengths_file", None)
    if given.get("method") != "draft":
        given.pop("draft_model", None)
    if "method" not in given:
        for name in ("tokens", "acceptance_rate", "draft_model"):
            given.pop(name, None)
    settings = {"max_num_seqs": page.get("max_num_seqs"), "chunked_prefill": page.get("chunked_prefill")}
    if isinstance(settings["max_num_seqs"], (int, float)) and settings["chunked_prefill"] is not None:
        chunked = {"on": True, "off": False}.get(settings["chunked_prefill"])
        given["engine_config"] = EngineConfig(
            max_num_seqs=int(settings["max_num_seqs"] or 256), chunked_prefill=chunked
        )
    return given


def serve_sim_answer(model, upload, device, tp, max_num_seqs, chunked_prefill, engine, engine_version, frontend,
                     rate, arrival, num_requests, seed, lengths, prompt_tokens, new_tokens, lengths_file, ttft_ms,
                     tpot_ms, percentile, prefix_tokens, prefix_hit_rate, speculative, spec_tokens, acceptance_rate,
                     draft_model):  # fmt: skip
    """The "Serve under load" tab: (message, the report's tables, downloads)."""
    page = dict(locals())  # every field, by name
    from perfpredict.llm.render_serving import latency_rows, render_serving_html, summary_rows, title
    from perfpredict.llm.serving import cached_serving
    from perfpredict.llm.serving_options import Serving

    def answer():
        r = cached_serving(_source(model, upload), Serving.of(**serving_fields(page)))
        html = (f"<h3>{escape(title(r))}</h3>" + _table(("latency", "p50", "p90", "p99", "mean"), latency_rows(r))
                + _table(("metric", "value", "detail"), summary_rows(r)) + _notes(r))  # fmt: skip
        return html, _files(r, render_serving_html, "serve-sim")

    return _guarded(answer)


def deploy_answer(model, upload, devices, tps, max_num_seqs, engines, frontend, rate, arrival, num_requests, seed,
                  lengths, prompt_tokens, new_tokens, lengths_file, ttft_ms, tpot_ms, percentile, prefix_tokens,
                  prefix_hit_rate, speculative, spec_tokens, acceptance_rate, draft_model):  # fmt: skip
    """The "Choose a deployment" tab: (message, the verdict, the frontier and the ranked table, downloads)."""
    page = dict(locals())
    from perfpredict.llm.deploy import cached_search
    from perfpredict.llm.deploy_search import Grid
    from perfpredict.llm.render_deploy import COLUMNS, frontier_svg, render_deploy_html, rows, verdict_line
    from perfpredict.llm.serving_options import Serving

    def answer():
        grid = Grid(tuple(devices or ()), tuple(int(t) for t in tps or ()), (1,), _batches(max_num_seqs),
                    _engines(engines))  # fmt: skip
        if not grid.devices or not grid.tps:
            from perfpredict.core.errors import InvalidInputError

            raise InvalidInputError("choose at least one GPU and one tp")
        serving = Serving.of(**serving_fields({k: v for k, v in page.items() if k not in ("max_num_seqs", "engines")}))
        r = cached_search(_source(model, upload), grid, serving)
        svg = frontier_svg(r, serving.slo.tpot_ms)
        html = (f'<p id="verdict"><b>{escape(verdict_line(r))}</b></p><h3>Cost per 1M tokens against TPOT</h3>'
                + svg + _table(COLUMNS, rows(r)))  # fmt: skip
        return html, _files(r, lambda rep: render_deploy_html(rep, serving.slo.tpot_ms, svg), "deploy")

    return _guarded(answer)


def _engines(text: Any) -> tuple[str, ...]:
    """The engine axis: names with or without their version, comma-separated (an unknown one fails in one line)."""
    from perfpredict.llm.engine_versions import parse_engine

    names = tuple(n.strip() for n in str(text or DEPLOY_ENGINES).split(",") if n.strip())
    for name in names:
        parse_engine(name)
    return names or (DEPLOY_ENGINES,)


def _batches(text: Any) -> tuple[int, ...]:
    from perfpredict.core.errors import InvalidInputError

    try:
        batches = tuple(int(v) for v in str(text or "256").split(",") if v.strip())
    except ValueError:
        raise InvalidInputError(f"max batch {text!r}: give whole numbers, comma-separated") from None
    if not batches or min(batches) < 1:
        raise InvalidInputError(f"max batch {text!r}: give whole numbers of at least 1")
    return batches


def _guarded(answer) -> tuple[str, str, list[str] | None]:
    """("", html, downloads), or for an error its one line and nothing else: the server keeps serving."""
    from perfpredict.core.errors import PerfPredictError

    try:
        return ("", *answer())
    except PerfPredictError as err:
        text = str(err)
    except Exception as err:  # noqa: BLE001 - the page says what went wrong
        text = f"perfpredict could not answer this ({type(err).__name__}: {err})"
    return f'<p class="error" style="color:#b00">{escape(text)}</p>', "", None


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f"<table><thead><tr>{''.join(f'<th>{escape(h)}</th>' for h in head)}</tr></thead><tbody>{cells}</tbody></table>"
    )


def _notes(r: Any) -> str:
    items = [f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in r.assumptions.items()]
    warnings = "".join(f'<p class="warning">{escape(w)}</p>' for w in r.warnings)
    return warnings + f"<details><summary>assumptions</summary><ul>{''.join(items)}</ul></details>"


def _files(report: Any, html, stem: str) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix="perfpredict-"))
    (folder / f"{stem}.json").write_text(report.to_json() + "\n")
    (folder / f"{stem}.html").write_text(html(report), encoding="utf-8")
    return [str(folder / f"{stem}.json"), str(folder / f"{stem}.html")]
