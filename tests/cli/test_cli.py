"""The command line: exit codes, one-line errors, and one end-to-end prediction."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfpredict.cli import main

REPO = Path(__file__).resolve().parents[2]
HAVE_API = (REPO / "perfpredict" / "api.py").is_file()


def _error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err  # one line, never a traceback
    assert lines[0].startswith("perfpredict: error: ")
    return lines[0]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["predict", "--hf", "bert-base", "--device", "H100-SXN"], "unknown device 'H100-SXN'"),
        (["predict", "--hf", "bert-base-uncasedd"], "--config path/to/config.json"),
        (["predict", "--hf", "gpt2", "--seq", "2048"], "sequence length 2048 is longer than 'gpt2' allows (1024"),
        (["predict", "--hf", "gpt2", "--batch", "0"], "batch size must be a positive integer, got '0'"),
        (["predict", "--hf", "gpt2", "--batch", "-4"], "batch size must be a positive integer, got '-4'"),
        (["predict", "--hf", "gpt2", "--batch", "2.5"], "batch size must be a positive integer"),
        (["predict", "--hf", "gpt2", "--dtype", "int7"], "invalid choice: 'int7'"),
        (["predict", "--hf", "resnet-50", "--seq", "64"], "vision model"),
        (["predict", "--config", "/no/such/config.json"], "does not exist"),
        (["predict"], "one of the arguments --hf --config --onnx is required"),
        (["predict", "--hf", "gpt2", "--config", "x.json"], "not allowed with argument"),
        (["predict", "--hf", "gpt2", "--max-latency-ms", "-1"], "expected a positive number"),
        (["explain", "--hf", "gpt2", "--top", "-2"], "expected a whole number >= 0"),
        (["predict", "--hf", "gpt2", "--activation-checkpointing", "sometimes"], "'every-<k>' (every k-th"),
        (["predict", "--hf", "gpt2", "--lora-rank", "16"], "add --training"),
        (
            ["predict", "--hf", "gpt2", "--training", "--float8", "rowwise", "--device", "A100-80GB"],
            "A100-80GB does not",
        ),
        (["predict", "--hf", "gpt2", "--device", "L4", "--power-limit", "30"], "minimum power limit, 40 W"),
        (["predict", "--hf", "gpt2", "--training", "--dp", "8", "--float8-all-gather"], "add fsdp=True"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "choose a command"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, expected) -> None:
    assert main(argv) == 2
    assert expected in _error_line(capsys)


def test_unknown_device_lists_close_names(capsys) -> None:
    assert main(["predict", "--hf", "bert-base", "--device", "H100-SXN"]) == 2
    assert "H100-SXM" in _error_line(capsys).split("H100-SXN")[1]


def test_unexpected_error_is_exit_1_unless_debug(capsys, mocker) -> None:
    mocker.patch("perfpredict.hardware.devices.list_devices", side_effect=RuntimeError("boom"))
    assert main(["devices"]) == 1
    line = _error_line(capsys)
    assert "RuntimeError: boom" in line and "rerun with --debug for the traceback" in line
    with pytest.raises(RuntimeError, match="boom"):
        main(["devices", "--debug"])


def test_help_exits_0(capsys) -> None:
    assert main(["--help"]) == 0
    assert "predict" in capsys.readouterr().out


def test_devices_and_models_json(capsys) -> None:
    assert main(["devices", "--json"]) == 0
    devices = json.loads(capsys.readouterr().out)
    h100 = next(d for d in devices if d["name"] == "H100-SXM")
    assert h100["memory_bytes"] > 0 and h100["mig_profiles"]
    assert main(["models", "--json"]) == 0
    models = {m["id"]: m for m in json.loads(capsys.readouterr().out)}
    assert "bert-base" in models["bert-base-uncased"]["aliases"]
    assert models["microsoft/resnet-50"]["input"] == "vision"


def test_models_table(capsys) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "meta-llama/Llama-2-7b-hf" in out and "llama-2-7b" in out


def test_python_dash_m_devices() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "perfpredict", "devices"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "H100-SXM" in proc.stdout and "A100-40GB" in proc.stdout and "Traceback" not in proc.stderr


@pytest.mark.skipif(not HAVE_API, reason="api not yet available")
def test_predict_end_to_end_json_and_html(capsys, tmp_path) -> None:
    from perfpredict.core.report import PerfReport

    html = tmp_path / "report.html"
    code = main(["predict", "--hf", "bert-base-uncased", "--device", "H100-SXM", "--json", "-", "--html", str(html)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = PerfReport.from_dict(json.loads(captured.out))  # stdout holds the JSON and nothing else
    assert report.model_name == "bert-base-uncased" and report.device == "H100-SXM"
    assert report.batch_size == 1 and report.seq_len == 128
    assert report.latency_ms.value > 0 and report.peak_memory_bytes.value > 0
    assert "<!DOCTYPE html>" in html.read_text()


@pytest.mark.skipif(not HAVE_API, reason="api not yet available")
def test_explain_small_model(capsys) -> None:
    assert main(["explain", "--hf", "distilbert", "--batch", "2", "--seq", "32", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "perfpredict explain: distilbert-base-uncased" in out and "Coverage:" in out


@pytest.mark.slow
def test_demo_prints_reports_and_mig_advice(capsys):
    # `make demo` runs exactly this: it must keep working as the CLI's options grow.
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.count("perfpredict: bert-base-uncased on") == 2 and "microsoft/resnet-50" in out
    assert "Recommended MIG profile on H100-SXM" in out and "Recommended MIG profile on A100-40GB" in out


def test_weights_built_in_none_drops_the_float32_load(capsys) -> None:
    peaks = {}
    for built in ("float32", "none"):
        assert (
            main(
                [
                    "predict",
                    "--hf",
                    "distilbert",
                    "--seq",
                    "32",
                    "--dtype",
                    "bfloat16",
                    "--predictor",
                    "analytical",
                    "--weights-built-in",
                    built,
                    "--json",
                    "-",
                ]
            )
            == 0
        )
        report = json.loads(capsys.readouterr().out)
        peaks[built] = (report["peak_memory_bytes"]["value"], report["memory"]["load_transient_bytes"])
    assert peaks["none"][1] == 0 and peaks["float32"][1] > 0  # 66M weights outweigh a batch of 32 tokens
    assert peaks["float32"][0] - peaks["none"][0] == pytest.approx(peaks["float32"][1])


def test_devices_fits_80_columns_and_wide_shows_every_column_uncut(capsys):
    import perfpredict

    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80 and "…" not in out
    names = [d.name for d in perfpredict.list_devices()]
    assert all(name in out for name in names)
    assert main(["devices", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "…" not in wide and "MIG profiles" in wide and "source" in wide
    assert "NVLink4 450" in wide and "GPU link" in wide  # H100 SXM: 900 GB/s both ways, 450 each
    assert "calibrated" in wide or "datasheet" in wide


def test_small_costs_print_without_an_exponent():
    from perfpredict.render.formats import fmt_usd

    assert fmt_usd(9.1e-05) == "$0.000091" and fmt_usd(0.0091) == "$0.0091" and fmt_usd(12.345) == "$12.35"


def test_a_repeated_question_is_answered_from_the_graph_cache(tmp_path, monkeypatch):
    from perfpredict.caching import graph_store
    from perfpredict.compiler_hooks import featurize

    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PERFPREDICT_NO_GRAPH_CACHE", raising=False)
    first, again = tmp_path / "a.json", tmp_path / "b.json"
    argv = ["predict", "--hf", "distilbert", "--seq", "32", "--device", "L4", "--top", "3"]
    assert main([*argv, "--json", str(first)]) == 0
    assert len(graph_store.STORE) == 1 and graph_store.STORE.directory() == tmp_path / "graph-store"

    def no_capture(*a, **k):
        raise AssertionError("the cached graph should have answered")

    monkeypatch.setattr(featurize, "featurize", no_capture)
    assert main([*argv, "--json", str(again)]) == 0
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    assert a["latency_ms"] == b["latency_ms"] and a["graph"] == b["graph"] and a["model_name"] == b["model_name"]
    # another batch is another graph, and --no-cache captures again: both reach the (failing) capture
    assert main([*argv, "--batch", "2"]) != 0 and main([*argv, "--no-cache"]) != 0
    assert graph_store.key(a=1) != graph_store.key(a=2)


@pytest.mark.parametrize("width", [80, 120])
def test_demo_summary_never_cuts_a_model_name(width):
    from types import SimpleNamespace

    from rich.console import Console

    from perfpredict.cli.demo import _demo_summary

    def row(name):
        value = lambda x: SimpleNamespace(value=x)
        return SimpleNamespace(
            model_name=name,
            device="A100-80GB",
            batch_size=8,
            predictor="two_timeline",
            latency_ms=value(9.7),
            throughput_per_s=value(800.0),
            peak_memory_bytes=value(2**31),
            energy_per_sample_j=value(0.5),
            mig=None,
        )

    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(_demo_summary([row("bert-base-uncased"), row("microsoft/resnet-50")]))
    text = console.export_text()
    assert "bert-base-uncased" in text and "microsoft/resnet-50" in text and "A100-80GB" in text
    if width == 120:  # a piped report's width: nothing at all is cut
        assert "…" not in text, text


def _config(tmp_path, **fields):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    return str(path)


def test_bad_model_input_is_one_clear_line_and_exit_2(capsys, tmp_path) -> None:
    empty = tmp_path / "checkpoint"
    empty.mkdir()
    (empty / "tokenizer.json").write_text("{}")
    assert main(["predict", "--config", str(empty), "--device", "H100"]) == 2
    line = _error_line(capsys)
    assert "has no config.json" in line and "does not exist" not in line and "tokenizer.json" in line

    bad = _config(tmp_path, model_type="bert", hidden_size=-64, num_attention_heads=4)
    assert main(["predict", "--config", bad, "--device", "H100"]) == 2
    line = _error_line(capsys)
    assert "hidden_size=-64" in line and "positive" in line and "RuntimeError" not in line


@pytest.mark.parametrize(
    "model_type, suggested, not_suggested",
    [("lamma", "llama", "voxtral"), ("mistrall", "mistral", "voxtral"), ("foo_bar_baz", None, "(close")],
)
def test_unknown_model_type_suggests_only_close_names(capsys, tmp_path, model_type, suggested, not_suggested):
    pytest.importorskip("transformers")
    assert main(["predict", "--config", _config(tmp_path, model_type=model_type, hidden_size=64)]) == 2
    line = _error_line(capsys)
    assert f"model_type {model_type!r}" in line and not_suggested not in line
    if suggested:
        assert f"(close: {suggested}" in line


def test_missing_command_lists_every_command(capsys) -> None:
    from perfpredict.cli.entry import COMMANDS, build_parser, command_names

    assert main([]) == 2
    listed = _error_line(capsys).split("choose a command: ")[1].split(" (")[0].split(", ")
    names = command_names(build_parser())
    assert listed == names and {"generate", "serve", "adapt", "calibrate-host"} <= set(names)
    assert len(names) >= len(COMMANDS)


def test_a_multi_gpu_memory_warning_is_printed_once(capsys, tmp_path) -> None:
    # a one-layer GPT-2 on two L4s at 60,000 x 256 tokens: its activations (~33 GiB per GPU) do not fit in 22.5 GiB
    config = {"model_type": "gpt2", "n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 1000, "n_positions": 256}
    (tmp_path / "config.json").write_text(json.dumps(config))
    argv = ["predict", "--config", str(tmp_path), "--device", "L4", "--tp", "2", "--batch", "60000", "--seq", "256"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert (captured.out + captured.err).count("does not fit. To bring it under 90%") == 1, captured
    assert "--batch " in captured.out  # the report's own warning, with its remedies


def test_generate_refuses_an_encoder_only_model_in_one_line(capsys) -> None:
    # BERT's causal-LM class attends both ways unless is_decoder: transformers warned 12 times and the answer meant
    # nothing; now one line, naming what generate takes
    assert main(["generate", "--hf", "bert-base", "--prompt-tokens", "128"]) == 2
    line = _error_line(capsys)
    assert "bert-base-uncased (bert) is an encoder-only model: generate takes a decoder-only LLM" in line
    assert "gpt2, llama, mistral, mixtral, qwen2 are shipped" in line and "`perfpredict predict`" in line
    assert main(["generate", "--hf", "t5-base"]) == 2
    assert "(t5) is not a decoder with a causal LM head" in _error_line(capsys)


def test_transformers_log_noise_is_quiet_unless_debug(tmp_path) -> None:
    import logging

    # transformers logs "You passed `num_labels=3` which is incompatible to the `id2label` map of length `2`"
    # while it reads this config: nothing about the prediction. A handler on transformers' own logger sees what it
    # lets through, whatever other handlers earlier tests left on it
    config = {"model_type": "bert", "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2,
              "intermediate_size": 128, "vocab_size": 1000, "id2label": {"0": "a", "1": "b"}, "num_labels": 3}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.addHandler(handler)
    try:
        argv = ["predict", "--config", str(tmp_path), "--seq", "16", "--json", str(tmp_path / "r.json")]
        assert main(argv) == 0
        assert not [m for m in seen if "num_labels" in m]
        assert logger.level == level  # scoped to the command: a library user keeps theirs
        assert main([*argv, "--debug"]) == 0
        assert [m for m in seen if "You passed `num_labels=3`" in m]
    finally:
        logger.removeHandler(handler)


def test_version_is_the_package_metadatas(capsys) -> None:
    import re
    from importlib.metadata import version

    import perfpredict

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"perfpredict {version('perfpredict')}\n"
    # the fallback for a source tree that is not installed says the same as pyproject.toml
    declared = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert perfpredict.__version__ == declared.group(1)


def test_devices_answers_which_gpu_a_training_step_fits(capsys, tmp_path) -> None:
    """``predict --devices``: one row per device, its peak memory and whether the step fits (here a tiny Llama
    fine-tuned with LoRA under full checkpointing, on a 24 GB L4 and an 80 GB H100)."""
    config = tmp_path / "config.json"
    fields = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 176,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 128,
        "max_position_embeddings": 128,
    }
    config.write_text(json.dumps(fields))
    argv = ["predict", "--config", str(config), "--training", "--seq", "32", "--lora-rank", "4"]
    argv += [
        "--activation-checkpointing",
        "full",
        "--predictor",
        "analytical",
        "--devices",
        "L4,H100-SXM",
        "--json",
        "-",
    ]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["device"] for r in rows] == ["L4", "H100-SXM"]
    assert [round(r["memory_gib"]) for r in rows] == [22, 80] and all(r["fits"] for r in rows)
    assert rows[0]["step_ms"] > rows[1]["step_ms"] > 0
