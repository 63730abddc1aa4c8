"""The web page: its answers equal the CLI's, bad input is one line, and a real headless Chromium drives it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from perfpredict.cli import main
from perfpredict.render.formats import fmt_time_ms

pytest.importorskip("gradio", reason="the web page needs gradio (perfpredict[ui])")


def _cli_latency(tmp_path, device: str, subprocess_env: dict | None = None) -> str:
    """The CLI's latency for bert-base-uncased on ``device``: in this process, or (for a comparison with the
    server, which sees the shipped catalog) in a fresh process like the server's."""
    out = tmp_path / f"{device}.json"
    argv = ["predict", "--hf", "bert-base-uncased", "--device", device, "--json", str(out)]
    if subprocess_env is None:
        assert main(argv) == 0
    else:
        subprocess.run(
            [sys.executable, "-m", "perfpredict", *argv],
            env=subprocess_env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    return fmt_time_ms(json.loads(out.read_text())["latency_ms"]["value"])


def test_the_page_answers_what_the_cli_answers_and_says_what_is_wrong_in_one_line(tmp_path):
    from perfpredict.web.app import answer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        message, table, roofline, kinds, files = answer(
            "bert-base-uncased",
            None,
            "inference",
            1,
            None,
            "default",
            "default",
            ["H100-SXM", "A100-80GB"],
            [],
            None,
            None,
        )
    assert message == "" and "<svg" in roofline and "matmul" in kinds and len(files) == 4
    for device in ("H100-SXM", "A100-80GB"):
        assert f"<td>{device}</td><td>{_cli_latency(tmp_path, device)}</td>" in table
    broken = tmp_path / "config.json"
    broken.write_text("{not json")
    message, table, *_ = answer(None, str(broken), "inference", 1, None, "default", "default", ["L4"], [], None, None)
    assert "not a JSON config.json" in message and table == "" and "Traceback" not in message
    message, *_ = answer("bert-base-uncased", None, "inference", 1, None, "default", "default", [], [], None, None)
    assert "at least one device" in message
    message, *_ = answer(str(broken), None, "inference", 1, None, "default", "default", ["L4"], [], None, None)
    assert "not a shipped model id" in message  # a typed path never reads the server's disk


def _browser():
    """A headless Chromium driven by Selenium, or the reason there is none."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None, "selenium is not installed"
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        return None, "no chromium and chromedriver on PATH (.ci/run installs them with apt-get)"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,2400"):
        options.add_argument(flag)
    try:
        return webdriver.Chrome(service=Service(driver), options=options), ""
    except Exception as err:  # noqa: BLE001 - a browser that cannot start is a skip with its reason
        return None, f"chromium did not start: {err}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    env = {**os.environ, "PERFPREDICT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfpredict", "serve", "--bind", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 900  # a hang guard: a busy 2-core host takes a while to import gradio and torch
    while time.time() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("perfpredict serve exited or did not start listening within 900 s")
    yield f"http://127.0.0.1:{port}/", env
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.slow
def test_a_real_browser_compares_two_gpus_and_sees_a_broken_upload(server, tmp_path):
    url, env = server
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser, why = _browser()
    if browser is None:
        print(f"skipping the browser test: {why}")
        pytest.skip(why)
    try:
        browser.get(url)
        wait = WebDriverWait(browser, 180)
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#predict"))).click()
        table = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#comparison")))
        rows = {
            r.find_elements(By.TAG_NAME, "td")[0].text: r.find_elements(By.TAG_NAME, "td")[1].text
            for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")
        }
        browser.save_screenshot(str(tmp_path / "compare.png"))
        assert rows == {d: _cli_latency(tmp_path, d, env) for d in ("H100-SXM", "A100-80GB")}
        broken = tmp_path / "broken_config.json"
        broken.write_text('{"hidden_size": 8}')
        browser.find_element(By.CSS_SELECTOR, "#upload input[type=file]").send_keys(str(broken))
        time.sleep(2)  # the upload reaches the server before the click
        browser.find_element(By.CSS_SELECTOR, "#predict").click()
        error = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#error")))
        browser.save_screenshot(str(tmp_path / "error.png"))
        assert "no 'model_type' field" in error.text
        assert (tmp_path / "compare.png").stat().st_size > 10_000
    finally:
        browser.quit()


def test_the_page_has_a_mode_and_a_host_and_says_what_limits_the_run():
    from perfpredict.graph_report import report_for_graph
    from perfpredict.hardware.devices import get_device
    from perfpredict.model_sources import HFSource
    from perfpredict.request import Request
    from perfpredict.web.app import answer

    args = ("bert-base-uncased", None, "inference", 1, None, "default", "default", ["H100-SXM"], [], None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = answer(*args)
        graphed = answer(*args, 1, 1, 1, False, "auto", "cuda_graph", "dev-vm")
    # the eager answer is host-bound and says what the other modes would take; the page shows it, not just the CLI
    assert "What limits the run" in eager[1] and "host-bound" in eager[1] and "cuda_graph" in eager[1]
    assert "<th>bound</th>" in eager[1] and "<td>host</td>" in eager[1]
    # the mode selector changes the answer, as --mode does, and the host selector is named
    graph = HFSource("bert-base-uncased").graph_for(Request(), get_device("H100-SXM")).graph
    cli = report_for_graph(graph, device="H100-SXM", weights_built_in=None, mode="cuda_graph", host="dev-vm")
    assert f"<td>H100-SXM</td><td>{fmt_time_ms(cli.latency_ms.value)}</td>" in graphed[1]
    assert "timelines (cuda_graph)" in graphed[1] and "host profile: dev-vm" in graphed[1]
    message, *_ = answer(*args, 1, 1, 1, False, "auto", "eager", "nope")
    assert "unknown host &#x27;nope&#x27;" in message and "h100-server, dev-vm, calibrated" in message


def test_the_generation_view_answers_what_perfpredict_generate_answers(tmp_path, monkeypatch):
    """The page's generation fields (engine, new tokens, weights, mode, host) ask what `perfpredict generate` asks:
    the same figures, tokens/s against batch drawn for every device, and generate --html's page to download."""
    from perfpredict.web.app import answer

    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(tmp_path))
    steps = (1, 1, 1, False)  # dp, tp, pp, fsdp
    asks = {
        # transformers' generate, int8 weights, CUDA graphs, on the slow dev VM host
        ("gpt2", "hf", "int8", "cuda_graph", "dev-vm", 2, 16, 4, "default", "offline"): [
            "--engine", "hf", "--weights", "int8", "--mode", "cuda_graph", "--host", "dev-vm"],
        # the vLLM-class engine (auto picks it when no mode is given), fp8 weights, the default host
        ("llama-2-7b", "auto", "fp8", "default", "default", 4, 16, 8, "default", "offline"): ["--weights", "fp8"],
        # vLLM 0.6 behind its OpenAI server: the engine's version and frontend reach the answer
        ("llama-2-7b", "vllm", "fp16", "default", "default", 4, 16, 8, "0.6", "openai-server"): [
            "--engine", "vllm", "--weights", "fp16", "--engine-version", "0.6", "--frontend", "openai-server"],
    }  # fmt: skip
    for (model, engine, weights, mode, host, batch, prompt, new, version, frontend), flags in asks.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            message, table, plot, _, files = answer(
                model, None, "generation", batch, prompt, "default", "default", ["H100-SXM"], [], None, None,
                *steps, engine, "eager", host, new, weights, mode, version, frontend,
            )  # fmt: skip
            out = tmp_path / f"{model}-{version}.json"
            argv = ["generate", "--hf", model, "--device", "H100-SXM", "--batch", str(batch), "--prompt-tokens"]
            argv += [str(prompt), "--new-tokens", str(new), *flags, "--no-cache", "--json", str(out)]
            assert main(argv) == 0
        cli = json.loads(out.read_text())
        assert message == "" and cli["weights"] == weights and (host == "default" or f"host: {host}" in table)
        assert cli["engine"] == ("hf" if engine == "hf" else "vllm") and (mode == "default" or cli["mode"] == mode)
        assert version == "default" or (cli["engine_version"], cli["frontend"]) == (version, frontend)
        row = f"<td>{cli['weights']}</td><td>{fmt_time_ms(cli['ttft_ms'])}</td><td>{fmt_time_ms(cli['tpot_mean_ms'])}</td>"
        assert row in table, (row, table)
        assert "Tokens/s against batch" in plot and "<svg" in plot
        page = next(f for f in files if f.endswith(".html"))
        html = Path(page).read_text(encoding="utf-8")
        assert "perfpredict generate:" in html and "Tokens/s against batch" in html and "<svg" in html
        assert fmt_time_ms(cli["tpot_mean_ms"]) in html
    message, *_ = answer("gpt2", None, "generation", 1, 16, "default", "default", ["H100-SXM"], [], None, None,
                         *steps, "hf", "eager", "nope", 2)  # fmt: skip
    assert "unknown host &#x27;nope&#x27;" in message


def test_serve_says_where_once_it_answers_there():
    """`perfpredict serve` prints its URL once the page answers (it printed nothing before)."""
    import urllib.request

    from perfpredict.core.errors import InvalidInputError
    from perfpredict.web.app import serve

    said, port = [], _free_port()
    app = serve("127.0.0.1", port, block=False, ready=said.append)
    try:
        assert said == [f"serving on http://127.0.0.1:{port}"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            assert page.status == 200 and b"perfpredict" in page.read()
        with pytest.raises(InvalidInputError, match=f"cannot serve on 127.0.0.1:{port}: .* choose another --port"):
            serve("127.0.0.1", port, block=False, ready=said.append)  # the port is taken
        assert len(said) == 1
    finally:
        app.close()


def test_serve_binds_with_bind_and_still_takes_host_with_a_warning(capsys):
    """--host means the CPU profile everywhere else: serve's address is --bind; its old --host still works, warned."""
    from perfpredict.cli.entry import build_parser
    from perfpredict.cli.serve import bind_address

    parser = build_parser()
    assert bind_address(parser.parse_args(["serve"])) == "127.0.0.1"
    assert bind_address(parser.parse_args(["serve", "--bind", "0.0.0.0"])) == "0.0.0.0"
    assert capsys.readouterr().err == ""
    assert bind_address(parser.parse_args(["serve", "--host", "0.0.0.0"])) == "0.0.0.0"
    assert "`serve --host` is deprecated and will be removed: use --bind" in capsys.readouterr().err
    assert main(["serve", "--host", "0.0.0.0", "--bind", "127.0.0.1"]) == 2
    assert "--bind '127.0.0.1' and --host '0.0.0.0' disagree" in capsys.readouterr().err


def test_the_pages_training_memory_inputs_become_the_requests_fields():
    from perfpredict.web.app import training_options
    from perfpredict.web.compare import Question

    page = {
        "activation_checkpointing": "selective-op",
        "float8": "tensorwise",
        "lora_rank": 16,
        "qlora": True,
        "optimizer_impl": "default",
        "offload_optimizer": False,
        "power_limit_w": 500,
    }
    options = training_options(page)
    assert options == {
        "activation_checkpointing": "selective-op",
        "float8": "tensorwise",
        "lora_rank": 16,
        "qlora": True,
        "power_limit_w": 500.0,
    }
    request = Question(model="gpt2", phase="training", options=options).request("H100-SXM")
    assert (request.activation_checkpointing, request.lora_rank, request.qlora) == ("selective-op", 16, True)
    assert training_options({"float8": "none", "lora_rank": 0, "activation_checkpointing": "default"}) == {}


def _page(**inputs) -> dict:
    """Every input of the page at its default (the handler's signature), changed by ``inputs``."""
    import inspect

    from perfpredict.web.app import answer

    page = {
        name: (p.default if p.default is not inspect.Parameter.empty else None)
        for name, p in inspect.signature(answer).parameters.items()
    }
    return {**page, "model": "gpt2", "phase": "training", "batch": 1, "devices": ["H100-SXM"], **inputs}


@pytest.mark.parametrize(
    ("inputs", "flags"),
    [
        (
            {
                **dict(dp=8, fsdp=True, fsdp_strategy="hybrid_shard", shard_group=4, microbatches=4),
                **dict(fsdp_param_dtype="bfloat16", fsdp_reduce_dtype="float32", float8="tensorwise"),
                **dict(float8_all_gather=True, activation_checkpointing="every-k", checkpoint_every=3),
                **dict(lora_rank=16, lora_targets=" q_proj,v_proj "),
            },
            [
                *("--dp", "8", "--fsdp", "hybrid_shard", "--shard-group", "4", "--microbatches", "4"),
                *("--fsdp-dtype", "bfloat16", "--fsdp-reduce-dtype", "float32", "--float8", "tensorwise"),
                *("--float8-all-gather", "--activation-checkpointing", "every-3"),
                *("--lora-rank", "16", "--lora-targets", "q_proj,v_proj"),
            ],
        ),
        ({"dp": 4, "zero_stage": 2, "microbatches": 8}, ["--dp", "4", "--zero-stage", "2", "--microbatches", "8"]),
    ],
    ids=["fsdp-hybrid-float8-lora-every-3", "zero-2-accumulation"],
)
def test_the_pages_training_inputs_ask_what_the_cli_flags_ask(inputs, flags):
    """ZeRO stage, HYBRID_SHARD's group, FSDP's MixedPrecisionPolicy dtypes, micro-batches, float8 all-gather, LoRA's
    target modules and checkpointing every k blocks: each page input fills the Request field or plan key the CLI's
    flag fills."""
    from perfpredict.cli.entry import build_parser
    from perfpredict.cli.model_args import request_from_args
    from perfpredict.parallel.plan import parse_plan
    from perfpredict.request import DEFAULT_DEVICE, field_names
    from perfpredict.web.app import _question

    web = _question(_page(**inputs)).request(DEFAULT_DEVICE)
    cli = request_from_args(build_parser().parse_args(["predict", "--hf", "gpt2", "--training", *flags]))
    assert parse_plan(web.parallel) == parse_plan(cli.parallel)
    for name in field_names():
        if name not in ("source", "parallel", "batch", "mode"):  # the page names its batch and mode itself
            assert getattr(web, name) == getattr(cli, name), name
    assert web.parallel == cli.parallel  # the same keys, not only the same plan once parsed
    plan = parse_plan(web.parallel)
    if "zero_stage" in inputs:
        assert (plan.zero_stage, plan.microbatches, plan.fsdp) == (2, 8, False)
    else:
        assert (plan.shard_group, plan.fsdp_param_dtype, plan.fsdp_reduce_dtype) == (4, "bfloat16", "float32")
        assert plan.float8_all_gather and (web.activation_checkpointing, web.lora_targets) == (
            "every-3",
            "q_proj,v_proj",
        )


def test_the_multi_gpu_answer_shows_the_worst_ranks_memory_term_by_term(tiny_llama_upload):
    """The page's multi-GPU answer lists the memory of each device's worst rank term by term, and the terms it shows
    sum to the peak memory per GPU, as the single-GPU report's terms do."""
    import re

    from perfpredict.core.units import GIB, KIB, MIB
    from perfpredict.render.formats import fmt_bytes
    from perfpredict.web.app import _question, memory_html, memory_terms
    from perfpredict.web.compare import compare

    page = _page(model=None, upload=tiny_llama_upload, seq=64, devices=["H100-SXM", "L4"], dp=2, pp=2, microbatches=4)
    message, table, *_ = answer_of(page)
    assert message == "" and 'id="memory"' in table
    result = compare(_question(page))
    html = memory_html(result)
    unit = {"B": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB}
    for r in result.reports:
        worst = max(r.stages, key=lambda s: s.memory.total_bytes)  # the stage that holds the most
        where, rows = memory_terms(r)
        assert len(r.stages) == 2 and where.startswith(f"the worst rank, stage {worst.stage} of 2")
        assert rows == worst.memory.rows()
        assert sum(size for _, size in rows) == r.peak_memory_bytes
        block = re.search(rf'<table class="memory-terms" id="memory-{r.device}">(.*?)</table>', html).group(1)
        shown = re.findall(r"<tr><td>(.*?)</td><td class=\"num\">([\d.]+) (B|KiB|MiB|GiB)</td></tr>", block)
        assert [name for name, _, _ in shown] == [name for name, size in rows if size]
        total = re.search(r"<th>peak memory per GPU</th><th class=\"num\">(.*?)</th>", block).group(1)
        assert total == fmt_bytes(r.peak_memory_bytes)
        # each shown term rounds to 3 significant figures: their sum is the peak to within that rounding
        summed = sum(float(v) * unit[u] for _, v, u in shown)
        assert summed == pytest.approx(r.peak_memory_bytes, rel=0.01)


def answer_of(page: dict):
    from perfpredict.web.app import answer

    return answer(**page)
