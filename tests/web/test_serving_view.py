"""The web page's serving tabs: their handlers answer what the CLI answers, and say what is wrong in one line."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from types import SimpleNamespace

from perfpredict.web import serving_view


def test_the_serve_under_load_tab_answers_as_serve_sim_does(tiny_llama_upload):
    from perfpredict.llm.serving import predict_serving
    from perfpredict.llm.vllm_config import EngineConfig

    message, html, files = serving_view.serve_sim_answer(
        None, tiny_llama_upload, "H100-SXM", 1, 20, 40, "fixed", 128, 16, 0, 5, 90, prefix_tokens=64
    )
    assert message == "" and "time per output token" in html and "prefix caching" in html
    page = json.loads(Path(files[0]).read_text())
    config = json.loads(Path(tiny_llama_upload).read_text())
    cli = predict_serving(config, rate_per_s=20, num_requests=40, prompt_tokens=128, new_tokens=16, tpot_ms=5,
                          shared_tokens=64, engine_config=EngineConfig())  # fmt: skip
    assert page["tpot"] == json.loads(cli.to_json())["tpot"] and page["goodput_per_s"] == cli.goodput_per_s


def test_the_deployment_tab_ranks_the_grid_and_draws_the_frontier(tiny_llama_upload):
    message, html, files = serving_view.deploy_answer(
        None, tiny_llama_upload, ["H100-SXM"], ["1", "3"], "16", 40, 30, "fixed", 128, 16, 0, 5, 90
    )
    assert message == "" and 'id="verdict"' in html and "<svg" in html and "cheapest meeting" in html
    report = json.loads(Path(files[0]).read_text())
    assert [o["status"] for o in report["outcomes"]] == ["meets", "refused"]  # tp 3 does not split 4 heads
    assert "<svg" in Path(files[1]).read_text()  # the downloaded page has the frontier too


def test_bad_input_is_one_line_in_the_page():
    message, html, files = serving_view.deploy_answer(
        "no-such-model", None, ["H100-SXM"], ["1"], "256", 5, 10, "fixed", 128, 16, 0, 50, 90
    )
    assert "is not a shipped model id" in message and html == "" and files is None
    message, _, _ = serving_view.deploy_answer("llama-2-7b", None, ["H100-SXM"], ["1"], "a,b", 5, 10, "fixed", 128,
                                               16, 0, 50, 90)  # fmt: skip
    assert "give whole numbers" in message


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
