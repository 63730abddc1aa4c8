"""``perfpredict serve``: a Gradio page to compare GPUs for one model, built on ``compare``.

The page renders what ``compare`` answers: a comparison table across the chosen devices, the roofline of the
model's ops on the first device (for generation: tokens/s against batch on every device), the time per op kind,
and the JSON and HTML reports to download. Bad input shows
one line in the page and the server keeps serving. It binds to 127.0.0.1 unless told otherwise; uploads are
size-limited and parsed as JSON or ONNX only (no pickle, no remote code).
"""

from __future__ import annotations

import inspect
import tempfile
from html import escape
from pathlib import Path
from typing import Any

from perfpredict.predictors.base import DEFAULT_MODE, RUN_MODES
from perfpredict.request import DEFAULT_DEVICE
from perfpredict.web.compare import MAX_ONNX_BYTES, PHASES, Answer, Question, compare, config_from_upload
from perfpredict.web.training_inputs import (
    SCALE_FIELDS,
    choice_given,
    parallel_plan,
    scale_inputs,
    training_memory_inputs,
    training_options,
)

__all__ = [
    "SCALE_FIELDS",
    "answer",
    "build_app",
    "memory_html",
    "memory_terms",
    "parallel_plan",
    "serve",
    "table_html",
    "training_options",
]

DEFAULT_DEVICES = (DEFAULT_DEVICE, "A100-80GB")


def build_app():
    import gradio as gr

    from perfpredict.compiler_hooks.attention_choice import ATTN_IMPLEMENTATIONS
    from perfpredict.compiler_hooks.hf_frontend import known_models
    from perfpredict.hardware.devices import list_devices
    from perfpredict.llm.engine_versions import ENGINES, VERSIONS
    from perfpredict.llm.host_costs import FRONTENDS
    from perfpredict.llm.weight_formats import FORMATS
    from perfpredict.predictors.host_model import host_names

    names = [d.name for d in list_devices()]
    ui: dict[str, Any] = {}  # the inputs, by the name of answer()'s parameter each one fills
    slices = [f"{d.name}/{m.name}" for d in list_devices() for m in d.mig_profiles]
    with gr.Blocks(title="perfpredict: compare GPUs") as app:
        gr.Markdown(
            "# perfpredict: how fast, how big, how costly, on which GPU\nPredicted at compile time, "
            "without the hardware. Pick a model and the devices to compare."
        )
        with gr.Row():
            ui["model"] = gr.Dropdown(
                known_models(),
                value="bert-base-uncased",
                label="shipped HuggingFace model",
                allow_custom_value=True,
                elem_id="model",
            )
            ui["upload"] = gr.File(
                label="or upload a config.json or an ONNX file", file_types=[".json", ".onnx"], elem_id="upload"
            )
        with gr.Row():
            ui["phase"] = gr.Radio(list(PHASES), value="inference", label="phase", elem_id="phase")
            ui["batch"] = gr.Number(value=1, precision=0, minimum=1, label="batch", elem_id="batch")
            ui["seq"] = gr.Number(
                value=0, precision=0, label="sequence length or prompt (0: the model's default)", elem_id="seq"
            )
            ui["dtype"] = gr.Dropdown(["default", "float32", "bfloat16", "float16"], value="default", label="dtype")
            ui["precision"] = gr.Dropdown(
                ["default", "fp32", "bf16", "amp-bf16", "amp-fp16"], value="default", label="training precision"
            )
        with gr.Row():
            ui["mode"] = gr.Radio(
                list(RUN_MODES),
                value=DEFAULT_MODE,
                label="run mode (eager; CUDA graphs; torch.compile; compile with reduce-overhead)",
                elem_id="mode",
            )
            ui["host"] = gr.Dropdown(
                ["default", *host_names()],
                value="default",
                label="host CPU driving the GPU (default: h100-server, a GPU server)",
                elem_id="host",
            )
            ui["attn_implementation"] = gr.Dropdown(
                ["default", *ATTN_IMPLEMENTATIONS],
                value="default",
                label="attention (HuggingFace models; default: the model's own, sdpa)",
                elem_id="attn_implementation",
            )
        ui["devices"] = gr.CheckboxGroup(names, value=list(DEFAULT_DEVICES), label="devices", elem_id="devices")
        ui["mig"] = gr.Dropdown(slices, value=[], multiselect=True, label="MIG slices (optional)")
        with gr.Row():
            ui["max_latency"] = gr.Number(value=0, label="latency target, ms (0: none)")
            ui["min_throughput"] = gr.Number(value=0, label="throughput target, samples/s (0: none)")
        multi_gpu = "multi-GPU (optional): the batch above is then one GPU's micro-batch"
        with gr.Accordion(multi_gpu, open=False), gr.Row():
            ui["dp"] = gr.Number(value=1, precision=0, minimum=1, label="data parallel (dp)", elem_id="dp")
            ui["tp"] = gr.Number(value=1, precision=0, minimum=1, label="tensor parallel (tp)", elem_id="tp")
            ui["pp"] = gr.Number(value=1, precision=0, minimum=1, label="pipeline stages (pp)", elem_id="pp")
            ui["fsdp"] = gr.Checkbox(value=False, label="FSDP (shard weights, gradients, optimizer)", elem_id="fsdp")
        scale_inputs(gr, ui)
        training_memory_inputs(gr, ui)
        with gr.Accordion("LLM generation (phase generation): as `perfpredict generate` asks", open=False):
            with gr.Row():
                ui["engine"] = gr.Radio(
                    list(ENGINES),
                    value="auto",
                    label="engine (vllm, sglang, trtllm, mii, llamacpp: serving engines; hf: transformers' generate; "
                    "auto: vllm where it applies, hf when a mode is given)",
                    elem_id="engine",
                )
                ui["engine_version"] = gr.Dropdown(
                    ["default", *sorted({v.version for v in VERSIONS})],
                    value="default",
                    label="engine version (--engine-version; default: the engine's current one)",
                    elem_id="engine_version",
                )
                ui["frontend"] = gr.Radio(
                    list(FRONTENDS),
                    value="offline",
                    label="frontend (offline: the engine's generate call; openai-server: its API server, streaming)",
                    elem_id="frontend",
                )
                ui["new_tokens"] = gr.Number(
                    value=128,
                    precision=0,
                    minimum=1,
                    label="new tokens (the prompt is the sequence length above; 0 there: 512)",
                    elem_id="new_tokens",
                )
            with gr.Row():
                ui["weights"] = gr.Dropdown(
                    ["default", *FORMATS],
                    value="default",
                    label="weight format (--weights; default: the compute dtype)",
                    elem_id="weights",
                )
                ui["generation_mode"] = gr.Dropdown(
                    ["default", *RUN_MODES],
                    value="default",
                    label="transformers' generate mode (--mode; default: the engine's own)",
                    elem_id="generation_mode",
                )
            with gr.Row():
                ui["disable_custom_all_reduce"] = gr.Checkbox(
                    value=False,
                    label="NCCL for every all-reduce (--disable-custom-all-reduce; tp and pp are the multi-GPU fields)",
                    elem_id="disable_custom_all_reduce",
                )
                ui["enable_expert_parallel"] = gr.Checkbox(
                    value=False,
                    label="experts split over the tp GPUs (--enable-expert-parallel, MoE models)",
                    elem_id="enable_expert_parallel",
                )
        go = gr.Button("Predict", variant="primary", elem_id="predict")
        message = gr.HTML(elem_id="message")
        table = gr.HTML(elem_id="table")
        roofline = gr.HTML(elem_id="roofline")
        kinds = gr.HTML(elem_id="kinds")
        files = gr.File(label="reports (JSON and HTML)", file_count="multiple", elem_id="downloads")
        # the handler's parameters name the inputs, so the page lists them once
        go.click(
            answer,
            [ui[name] for name in inspect.signature(answer).parameters],
            [message, table, roofline, kinds, files],
        )
        from perfpredict.web import serving_view

        serving_view.build(gr, known_models(), names)  # the "Serve under load" and "Choose a deployment" tabs
    return app


def answer(
    model,
    upload,
    phase,
    batch,
    seq,
    dtype,
    precision,
    devices,
    mig,
    max_latency,
    min_throughput,
    dp=1,
    tp=1,
    pp=1,
    fsdp=False,
    engine="auto",
    mode=DEFAULT_MODE,
    host="default",
    new_tokens=128,
    weights="default",
    generation_mode="default",
    engine_version="default",
    frontend="offline",
    attn_implementation="default",
    cp=1,
    global_batch=0,
    schedule="1f1b",
    virtual_stages=1,
    fsdp_strategy="full_shard",
    gpus_per_node=8,
    nvlink_domain=0,
    inter_node_gbps=0,
    sp=False,
    async_tp=False,
    activation_checkpointing="default",
    float8="none",
    lora_rank=0,
    qlora=False,
    optimizer_impl="default",
    offload_optimizer=False,
    power_limit_w=0,
    disable_custom_all_reduce=False,
    enable_expert_parallel=False,
    microbatches=1,
    zero_stage=0,
    shard_group=0,
    fsdp_param_dtype="default",
    fsdp_reduce_dtype="default",
    float8_all_gather=False,
    lora_targets="",
    checkpoint_every=2,
):
    """The page's handler: every error becomes one line in the page, never a traceback. ``mode`` is a step's
    (inference, training); ``generation_mode``, ``new_tokens`` and ``weights`` are generation's, as `perfpredict
    generate`'s --mode, --new-tokens and --weights ("default": the option left out); ``cp`` to ``async_tp``, and
    ``microbatches`` to ``float8_all_gather``, are the training-at-scale plan keys (:data:`SCALE_FIELDS`, each left
    out at its default); the training-memory fields are Request fields (``training_options``: ``checkpoint_every`` is
    the k of the "every-k" checkpointing choice)."""
    inputs = dict(locals())  # every input, by name (the page lists them once: build_app reads this signature)
    from perfpredict.core.errors import PerfPredictError

    try:
        q = _question(inputs)
        result = compare(q)
    except PerfPredictError as err:
        return _message(str(err)), "", "", "", None
    except Exception as err:  # noqa: BLE001 - the server keeps serving; the page says what went wrong
        return _message(f"perfpredict could not answer this ({type(err).__name__}: {err})"), "", "", "", None
    return "", table_html(result), _roofline(result), _kinds(result), _downloads(result)


def _question(page: dict[str, Any]) -> Question:
    """The Question the page's inputs ask ("default" and 0: the option left out)."""
    from perfpredict.core.errors import InvalidInputError

    source: Any = page["model"] or None
    onnx = None
    upload = page["upload"]
    if upload:
        path = Path(upload if isinstance(upload, str) else upload.name)
        if path.suffix.lower() == ".onnx":
            if path.stat().st_size > MAX_ONNX_BYTES:
                raise InvalidInputError(f"the ONNX file is over {MAX_ONNX_BYTES >> 20} MiB")
            onnx, source = str(path), None
        else:
            source = config_from_upload(path.read_bytes())
    generation = page["phase"] == "generation"
    return Question(
        model=source,
        onnx_path=onnx,
        phase=page["phase"],
        batch=int(page["batch"] or 1),
        seq=int(page["seq"]) if page["seq"] else None,
        dtype=choice_given(page["dtype"]),
        precision=choice_given(page["precision"]),
        devices=(*(page["devices"] or ()), *(page["mig"] or ())),
        max_latency_ms=page["max_latency"] or None,
        min_throughput_per_s=page["min_throughput"] or None,
        parallel=parallel_plan(
            page["dp"], page["tp"], page["pp"], page["fsdp"], **{k: page[k] for k in SCALE_FIELDS if k in page}
        ),
        engine=page["engine"] or "auto",
        engine_version=choice_given(page["engine_version"]),
        frontend=page["frontend"] or "offline",
        mode=choice_given(page["generation_mode"]) if generation else (page["mode"] or DEFAULT_MODE),
        host=choice_given(page["host"]),
        new_tokens=int(page["new_tokens"]) if page["new_tokens"] not in (None, "") else 128,
        weights=choice_given(page["weights"]),
        attn_implementation=choice_given(page.get("attn_implementation")),
        options=training_options(page),
        disable_custom_all_reduce=bool(page.get("disable_custom_all_reduce")),
        enable_expert_parallel=bool(page.get("enable_expert_parallel")),
    )


def _message(text: str) -> str:
    return f'<p class="error" id="error" style="color:#b00">{escape(text)}</p>'


def table_html(result: Answer) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in result.columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>" for row in result.rows)
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in result.notes)
    return (
        f'<table id="comparison"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}'
        + memory_html(result)
        + timelines_html(result)
    )


def memory_html(result: Answer) -> str:
    """Memory per GPU on each device, term by term, as the reports list them: a multi-GPU step's worst rank (the
    stage that holds the most), or the one GPU. The terms sum to the peak (a term of 0 is left out)."""
    from perfpredict.render.formats import fmt_bytes

    tables = []
    for r in result.reports:
        terms = memory_terms(r)
        if terms is None:
            continue
        where, rows = terms
        cells = "".join(
            f'<tr><td>{escape(name)}</td><td class="num">{escape(fmt_bytes(size))}</td></tr>'
            for name, size in rows
            if size
        )
        total = fmt_bytes(sum(size for _, size in rows))
        tables.append(
            f'<table class="memory-terms" id="memory-{escape(r.device)}"><caption>{escape(r.device)}: '
            f"{escape(where)}</caption><tbody>{cells}</tbody><tfoot><tr><th>peak memory per GPU</th>"
            f'<th class="num">{escape(total)}</th></tr></tfoot></table>'
        )
    return f'<h3>Memory per GPU, term by term</h3><div id="memory">{"".join(tables)}</div>' if tables else ""


def memory_terms(report: Any) -> tuple[str, list[tuple[str, int]]] | None:
    """(whose memory it is, its (term, bytes) rows) for a step's report; None for one without terms (generation)."""
    stages = getattr(report, "stages", None)
    if stages:  # a ParallelReport: its worst rank, as the CLI's memory lines mark it
        worst = report.worst_stage
        where = f"the worst rank, stage {worst.stage} of {len(stages)}" if len(stages) > 1 else "every rank alike"
        return f"{where} (peak at {worst.memory.peak_at or 'the step'})", worst.memory.rows()
    memory = getattr(report, "memory", None)
    if memory is not None and hasattr(memory, "rows"):
        return f"one GPU (peak at {memory.peak_at or 'the step'})", memory.rows()
    return None


def timelines_html(result: Answer) -> str:
    """What limits each device's run: device, host and wall time, the bound, and, host-bound, the other modes."""
    from perfpredict.render.limits_text import timeline_lines, trainer_lines

    def lines(r) -> list[str]:
        if hasattr(r, "rank_timeline"):  # a multi-GPU step: the trainer's view (its rank timeline is in the table)
            return trainer_lines(r)
        return (timeline_lines(r) if getattr(r, "timeline", None) is not None else []) + trainer_lines(r)

    items = [
        f"<li><b>{escape(r.device)}</b>: " + "<br>".join(escape(line) for line in lines(r)) + "</li>"
        for r in result.reports
        if lines(r)
    ]
    return f'<h3>What limits the run</h3><ul id="timelines">{"".join(items)}</ul>' if items else ""


def _roofline(result: Answer) -> str:
    """The answer's plot: the roofline of the model's ops on the first device, or generation's tokens/s against
    batch on every device."""
    if result.reports and hasattr(result.reports[0], "batch_sweep"):  # GenerationReports
        from perfpredict.llm.render_generation import batch_sweep_svg

        return '<h3 id="batch-sweep">Tokens/s against batch</h3>' + batch_sweep_svg(result.reports)
    if result.graph is None or not result.reports:
        return ""
    from perfpredict.hardware.devices import get_device
    from perfpredict.kernels.plot import roofline_svg

    return f"<h3>Roofline on {escape(result.reports[0].device)}</h3>" + roofline_svg(
        result.graph, get_device(result.reports[0].device), report=result.reports[0]
    )


def _kinds(result: Answer) -> str:
    first = result.reports[0] if result.reports else None
    if first is None or not getattr(first, "by_kind", ()):
        return ""
    from perfpredict.render.text import kind_rows, kinds_title

    rows = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>" for row in kind_rows(first))
    return (
        f"<h3>{escape(kinds_title(first))} on {escape(first.device)}</h3><table><thead><tr><th>op kind</th><th>ops</th>"
        f"<th>time</th><th>share</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _downloads(result: Answer) -> list[str]:
    folder = Path(tempfile.mkdtemp(prefix="perfpredict-"))
    paths = []
    for r in result.reports:
        stem = r.device.replace("/", "_")
        (folder / f"{stem}.json").write_text(r.to_json() + "\n")
        paths.append(str(folder / f"{stem}.json"))
        if hasattr(r, "memory"):  # a PerfReport
            from perfpredict.render.html import render_html

            page = render_html(r)
        elif hasattr(r, "batch_sweep"):  # a GenerationReport: `perfpredict generate --html`'s page
            from perfpredict.llm.render_generation import render_generation_html

            page = render_generation_html(r)
        else:
            continue
        (folder / f"{stem}.html").write_text(page, encoding="utf-8")
        paths.append(str(folder / f"{stem}.html"))
    return paths


def serve(bind: str = "127.0.0.1", port: int = 7860, *, block: bool = True, ready=print):
    """Serve the page on ``bind``:``port`` and call ``ready("serving on http://BIND:PORT")`` once it answers; then
    serve until interrupted (``block``), or return the running app (``app.close()`` stops it)."""
    from perfpredict.core.errors import InvalidInputError

    _check_can_listen(bind, port)  # before building the page: a taken port is said at once
    app = build_app()
    try:
        app.launch(
            server_name=bind,
            server_port=port,
            max_file_size=MAX_ONNX_BYTES,
            show_error=False,
            quiet=True,
            prevent_thread_lock=True,
        )
    except OSError as err:  # gradio's "Cannot find empty port", or an address this machine does not have
        raise InvalidInputError(
            f"cannot serve on {bind}:{port}: {err}; choose another --port, or a --bind address of this machine"
        ) from err
    ready(f"serving on http://{bind}:{app.server_port}")
    if not block:
        return app
    try:
        app.block_thread()  # until Ctrl-C, which it turns into app.close()
    finally:
        app.close()
    return None


def _check_can_listen(bind: str, port: int) -> None:
    import socket

    from perfpredict.core.errors import InvalidInputError

    try:
        family, kind, proto, _, address = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does: a listener still fails
            probe.bind(address)
    except OSError as err:
        raise InvalidInputError(
            f"cannot serve on {bind}:{port}: {err.strerror or err}; choose another --port, or a --bind address of "
            "this machine"
        ) from err
