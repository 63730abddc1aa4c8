"""The web page's serving tabs: their handlers answer what the CLI answers, and say what is wrong in one line."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from types import SimpleNamespace

from perfpredict.web import serving_view

PAGE = dict(model=None, upload=None, rate=20, arrival="poisson", num_requests=40, seed=0, lengths="fixed",
            prompt_tokens=128, new_tokens=16, lengths_file=None, ttft_ms=0, tpot_ms=5, percentile=90,
            prefix_tokens=0, prefix_hit_rate=0, speculative="off", spec_tokens=5, acceptance_rate=0,
            draft_model=None)  # fmt: skip
SIM_ENGINE = dict(engine="vllm", engine_version="default", frontend="offline")  # the serve tab's defaults
DEPLOY_ENGINE = dict(engines="vllm", frontend="offline")  # the deployment tab's


def test_the_serve_under_load_tab_answers_as_serve_sim_does(tiny_llama_upload):
    from perfpredict.llm.serving import predict_serving
    from perfpredict.llm.vllm_config import EngineConfig

    page = {**PAGE, "upload": tiny_llama_upload, "prefix_tokens": 64, "speculative": "ngram", "spec_tokens": 3}
    message, html, files = serving_view.serve_sim_answer(
        device="H100-SXM", tp=1, max_num_seqs=16, chunked_prefill="on", **SIM_ENGINE, **page
    )
    assert message == "" and "time per output token" in html and "prefix caching" in html
    report = json.loads(Path(files[0]).read_text())
    config = json.loads(Path(tiny_llama_upload).read_text())
    cli = predict_serving(config, rate_per_s=20, num_requests=40, prompt_tokens=128, new_tokens=16, tpot_ms=5,
                          shared_tokens=64, method="ngram", tokens=3,
                          engine_config=EngineConfig(max_num_seqs=16, chunked_prefill=True))  # fmt: skip
    assert report == json.loads(cli.to_json())


def test_every_serving_option_is_a_field_of_the_page():
    import dataclasses

    from perfpredict.llm.serving_options import PrefixCache, RequestStream, Serving, Slo, Speculative

    options = {f.name for c in (RequestStream, Slo, PrefixCache, Speculative) for f in dataclasses.fields(c)}
    assert options | {"engine", "engine_version", "frontend"} <= set(serving_view.PAGE_FIELDS.values())
    for handler in (serving_view.serve_sim_answer, serving_view.deploy_answer):
        fields = set(inspect.signature(handler).parameters)
        assert {k for k, v in serving_view.PAGE_FIELDS.items() if v in options} <= fields
        assert "frontend" in fields
    # the serve tab asks for the engine and its version; the deployment tab's engines are its grid's axis
    assert {"engine", "engine_version"} <= set(inspect.signature(serving_view.serve_sim_answer).parameters)
    assert "engines" in inspect.signature(serving_view.deploy_answer).parameters
    # the page's engine settings and a lengths file reach the question
    fields = serving_view.serving_fields({**PAGE, "max_num_seqs": 32, "chunked_prefill": "off", "seed": 3})
    serving = Serving.of(**fields)
    assert serving.engine_config.max_num_seqs == 32 and serving.engine_config.chunked_prefill is False
    assert serving.stream.seed == 3 and serving.stream.rate_per_s == 20 and serving.speculative is None


def test_the_serve_tab_runs_the_engine_version_and_frontend_it_is_given_as_serve_sim_does(tiny_llama_upload):
    from perfpredict.llm.serving import predict_serving

    page = {**PAGE, "upload": tiny_llama_upload, "rate": 5, "num_requests": 8}
    engine = dict(engine="trtllm", engine_version="0.11", frontend="openai-server")
    message, html, files = serving_view.serve_sim_answer(device="H100-SXM", tp=1, max_num_seqs=16,
                                                         chunked_prefill="default", **engine, **page)  # fmt: skip
    assert message == "" and "(TensorRT-LLM 0.11, behind its OpenAI server)" in html
    config = json.loads(Path(tiny_llama_upload).read_text())
    from perfpredict.llm.vllm_config import EngineConfig

    cli = predict_serving(config, rate_per_s=5, num_requests=8, prompt_tokens=128, new_tokens=16, tpot_ms=5,
                          engine="trtllm", engine_version="0.11", frontend="openai-server",
                          engine_config=EngineConfig(max_num_seqs=16))  # fmt: skip
    assert json.loads(Path(files[0]).read_text()) == json.loads(cli.to_json())
    # "default" (or blank) is the engine's current version; an unknown version is one line
    fields = serving_view.serving_fields({**PAGE, **SIM_ENGINE, "engine": "sglang"})
    assert "engine_version" not in fields and fields["engine"] == "sglang" and fields["frontend"] == "offline"
    message, _, _ = serving_view.serve_sim_answer(device="H100-SXM", tp=1, max_num_seqs=16, chunked_prefill="default",
                                                  **{**engine, "engine_version": "9.9"}, **page)  # fmt: skip
    assert "is not modelled" in message


def test_the_deployment_tabs_engines_are_its_grids_axis_and_its_frontend_every_candidates(tiny_llama_upload):
    from perfpredict.llm.deploy import search_deployments
    from perfpredict.llm.deploy_search import Grid
    from perfpredict.llm.serving_options import Serving

    page = {**PAGE, "upload": tiny_llama_upload, "rate": 5, "num_requests": 8}
    engines = dict(engines="vllm-0.6, trtllm", frontend="openai-server")
    message, _, files = serving_view.deploy_answer(devices=["H100-SXM"], tps=["1"], max_num_seqs="16", **engines,
                                                   **page)  # fmt: skip
    assert message == ""
    config = json.loads(Path(tiny_llama_upload).read_text())
    serving = Serving.of(rate_per_s=5, num_requests=8, prompt_tokens=128, new_tokens=16, tpot_ms=5,
                         frontend="openai-server")  # fmt: skip
    cli = search_deployments(config, Grid(("H100-SXM",), (1,), (1,), (16,), ("vllm-0.6", "trtllm")), serving)
    assert json.loads(Path(files[0]).read_text()) == json.loads(cli.to_json())
    message, _, _ = serving_view.deploy_answer(devices=["H100-SXM"], tps=["1"], max_num_seqs="16",
                                               engines="vllm, nope", frontend="offline", **page)  # fmt: skip
    assert "nope" in message


def test_the_deployment_tab_ranks_the_grid_and_draws_the_frontier(tiny_llama_upload):
    page = {**PAGE, "upload": tiny_llama_upload}
    message, html, files = serving_view.deploy_answer(devices=["H100-SXM"], tps=["1", "3"], max_num_seqs="16",
                                                      **DEPLOY_ENGINE, **page)  # fmt: skip
    assert message == "" and 'id="verdict"' in html and "<svg" in html and "cheapest meeting" in html
    report = json.loads(Path(files[0]).read_text())
    assert [o["status"] for o in report["outcomes"]] == ["meets", "refused"]  # tp 3 does not split 4 heads
    assert "<svg" in Path(files[1]).read_text()  # the downloaded page has the frontier too


def test_bad_input_is_one_line_in_the_page():
    grid = dict(devices=["H100-SXM"], tps=["1"], **DEPLOY_ENGINE)
    message, html, files = serving_view.deploy_answer(max_num_seqs="256", **grid, **{**PAGE, "model": "no-model"})
    assert "is not a shipped model id" in message and html == "" and files is None
    message, _, _ = serving_view.deploy_answer(max_num_seqs="a,b", **grid, **{**PAGE, "model": "llama-2-7b"})
    assert "give whole numbers" in message
    message, _, _ = serving_view.deploy_answer(max_num_seqs="256", **grid, **{**PAGE, "lengths": "file"})
    assert "needs a lengths file" in message


class _Gradio:
    """Just enough of gradio to build the tabs: components are namespaces, and each click is recorded."""

    def __init__(self) -> None:
        self.clicks: list[tuple] = []

    def __getattr__(self, name):
        def component(*args, **kwargs):
            return _Block(self, name)

        return component


class _Block(SimpleNamespace):
    def __init__(self, gr, kind):
        super().__init__(gr=gr, kind=kind)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def click(self, fn, inputs, outputs):
        self.gr.clicks.append((fn, inputs, outputs))


def test_each_tab_gives_its_handler_one_input_per_parameter():
    gr = _Gradio()
    serving_view.build(gr, ["llama-2-7b"], ["H100-SXM", "L4"])
    handlers = {fn: len(inputs) for fn, inputs, _ in gr.clicks}
    assert handlers == {
        serving_view.serve_sim_answer: len(inspect.signature(serving_view.serve_sim_answer).parameters),
        serving_view.deploy_answer: len(inspect.signature(serving_view.deploy_answer).parameters),
    }
