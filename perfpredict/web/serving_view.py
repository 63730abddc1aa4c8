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


def build(gr: Any, models: list[str], devices: list[str]) -> None:
    """The two tabs, inside the page's Blocks."""
    with gr.Tabs():
        with gr.Tab("Serve under load", elem_id="serve-sim-tab"):
            ui: dict[str, Any] = {}
            _source_fields(gr, ui, "sim")
            with gr.Row():
                ui["device"] = gr.Dropdown(devices, value=DEFAULT_DEVICE, label="device", elem_id="sim_device")
                ui["tp"] = gr.Number(value=1, precision=0, minimum=1, label="tp", elem_id="sim_tp")
            _load_fields(gr, ui, "sim", num_requests=1000)
            with gr.Row():
                ui["prefix_tokens"] = gr.Number(
                    value=0, precision=0, label="shared prefix tokens (0: no prefix caching)"
                )
                ui["speculative"] = gr.Dropdown(["off", "ngram", "draft"], value="off", label="speculative decoding")
                ui["spec_tokens"] = gr.Number(value=5, precision=0, minimum=1, label="k, tokens proposed a step")
                ui["acceptance_rate"] = gr.Number(value=0, label="acceptance rate (0: the method's default)")
                ui["draft_model"] = gr.Dropdown(models, value=None, label="draft model", allow_custom_value=True)
            go = gr.Button("Simulate", variant="primary", elem_id="simulate")
            outputs = [gr.HTML(elem_id="sim_message"), gr.HTML(elem_id="sim_answer"), gr.File(file_count="multiple")]
            go.click(serve_sim_answer, [ui[n] for n in inspect.signature(serve_sim_answer).parameters], outputs)
        with gr.Tab("Choose a deployment", elem_id="deploy-tab"):
            ui = {}
            _source_fields(gr, ui, "deploy")
            with gr.Row():
                choices = [d for d in DEPLOY_DEVICES if d in devices]
                ui["devices"] = gr.CheckboxGroup(devices, value=choices, label="GPUs", elem_id="deploy_devices")
                ui["tps"] = gr.CheckboxGroup(list(TPS), value=list(TPS), label="tp", elem_id="deploy_tps")
                ui["max_num_seqs"] = gr.Textbox(value="256", label="max batch (max_num_seqs), comma-separated")
            _load_fields(gr, ui, "deploy", num_requests=300)
            go = gr.Button("Search", variant="primary", elem_id="search")
            outputs = [
                gr.HTML(elem_id="deploy_message"),
                gr.HTML(elem_id="deploy_answer"),
                gr.File(file_count="multiple"),
            ]
            go.click(deploy_answer, [ui[n] for n in inspect.signature(deploy_answer).parameters], outputs)


def _source_fields(gr: Any, ui: dict, prefix: str) -> None:
    from perfpredict.compiler_hooks.hf_frontend import known_models

    with gr.Row():
        ui["model"] = gr.Dropdown(known_models(), value="llama-2-7b", label="shipped decoder LLM",
                                  allow_custom_value=True, elem_id=f"{prefix}_model")  # fmt: skip
        ui["upload"] = gr.File(label="or upload a config.json", file_types=[".json"], elem_id=f"{prefix}_upload")


def _load_fields(gr: Any, ui: dict, prefix: str, num_requests: int) -> None:
    with gr.Row():
        ui["rate"] = gr.Number(value=10, label="requests/s (0: all at t = 0)", elem_id=f"{prefix}_rate")
        ui["num_requests"] = gr.Number(value=num_requests, precision=0, minimum=1, label="requests")
        ui["lengths"] = gr.Radio(["fixed", "sharegpt"], value="sharegpt", label="lengths", elem_id=f"{prefix}_lengths")
        ui["prompt_tokens"] = gr.Number(value=512, precision=0, minimum=1, label="prompt tokens (fixed)")
        ui["new_tokens"] = gr.Number(value=128, precision=0, minimum=1, label="output tokens (fixed)")
    with gr.Row():
        ui["ttft_ms"] = gr.Number(value=2000, label="TTFT target, ms (0: none)", elem_id=f"{prefix}_ttft")
        ui["tpot_ms"] = gr.Number(value=100, label="TPOT target, ms (0: none)", elem_id=f"{prefix}_tpot")
        ui["percentile"] = gr.Number(value=90, label="at percentile")


def _source(model: Any, upload: Any) -> Any:
    """An uploaded config's fields, or a shipped id (never a path on the server's disk)."""
    from perfpredict.compiler_hooks.hf_frontend import resolve_id
    from perfpredict.core.errors import InvalidInputError
    from perfpredict.web.compare import config_from_upload

    if upload:
        return config_from_upload(Path(upload if isinstance(upload, str) else upload.name).read_bytes())
    if not model or resolve_id(model) is None:
        raise InvalidInputError(f"{model!r} is not a shipped model id; upload its config.json instead")
    return model


def _load(rate, num_requests, lengths, prompt_tokens, new_tokens, ttft_ms, tpot_ms, percentile) -> dict:
    """The Serving fields of the load and the SLO (0: left out)."""
    fields = {"num_requests": int(num_requests or 1), "lengths": lengths or "fixed",
              "prompt_tokens": int(prompt_tokens or 512), "new_tokens": int(new_tokens or 128),
              "percentile": float(percentile or 90)}  # fmt: skip
    for name, value in (("rate_per_s", rate), ("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)):
        if value:
            fields[name] = float(value)
    return fields


def serve_sim_answer(model, upload, device, tp, rate, num_requests, lengths, prompt_tokens, new_tokens, ttft_ms,
                     tpot_ms, percentile, prefix_tokens=0, speculative="off", spec_tokens=5, acceptance_rate=0,
                     draft_model=None):  # fmt: skip
    """The "Serve under load" tab: (message, the report's tables, downloads)."""
    from perfpredict.llm.render_serving import latency_rows, render_serving_html, summary_rows, title
    from perfpredict.llm.serving import cached_serving
    from perfpredict.llm.serving_options import Serving

    def answer():
        fields = _load(rate, num_requests, lengths, prompt_tokens, new_tokens, ttft_ms, tpot_ms, percentile)
        fields.update(device=device or DEFAULT_DEVICE, tp=int(tp or 1))
        if prefix_tokens:
            fields["shared_tokens"] = int(prefix_tokens)
        if speculative and speculative != "off":
            fields.update(method=speculative, tokens=int(spec_tokens or 5))
            fields.update({"acceptance_rate": float(acceptance_rate)} if acceptance_rate else {})
            fields.update({"draft_model": draft_model} if speculative == "draft" else {})
        r = cached_serving(_source(model, upload), Serving.of(**fields))
        html = (f"<h3>{escape(title(r))}</h3>" + _table(("latency", "p50", "p90", "p99", "mean"), latency_rows(r))
                + _table(("metric", "value", "detail"), summary_rows(r)) + _notes(r))  # fmt: skip
        return html, _files(r, render_serving_html, "serve-sim")

    return _guarded(answer)


def deploy_answer(model, upload, devices, tps, max_num_seqs, rate, num_requests, lengths, prompt_tokens, new_tokens,
                  ttft_ms, tpot_ms, percentile):  # fmt: skip
    """The "Choose a deployment" tab: (message, the verdict, the frontier and the ranked table, downloads)."""
    from perfpredict.llm.deploy import cached_search
    from perfpredict.llm.deploy_search import Grid
    from perfpredict.llm.render_deploy import COLUMNS, frontier_svg, render_deploy_html, rows, verdict_line
    from perfpredict.llm.serving_options import Serving

    def answer():
        from perfpredict.core.errors import InvalidInputError

        if not devices or not tps:
            raise InvalidInputError("choose at least one GPU and one tp")
        try:
            batches = tuple(int(v) for v in str(max_num_seqs or "256").split(",") if v.strip())
        except ValueError:
            raise InvalidInputError(f"max batch {max_num_seqs!r}: give whole numbers, comma-separated") from None
        if not batches or min(batches) < 1:
            raise InvalidInputError(f"max batch {max_num_seqs!r}: give whole numbers of at least 1")
        grid = Grid(tuple(devices), tuple(int(t) for t in tps), (1,), batches)
        fields = _load(rate, num_requests, lengths, prompt_tokens, new_tokens, ttft_ms, tpot_ms, percentile)
        r = cached_search(_source(model, upload), grid, Serving.of(**fields))
        target = fields.get("tpot_ms")
        svg = frontier_svg(r, target)
        html = (f'<p id="verdict"><b>{escape(verdict_line(r))}</b></p><h3>Cost per 1M tokens against TPOT</h3>'
                + svg + _table(COLUMNS, rows(r)))  # fmt: skip
        return html, _files(r, lambda rep: render_deploy_html(rep, target, svg), "deploy")

    return _guarded(answer)


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
