"""Memory you can act on (issue 40, section 2): the peak's terms are named as they are and sum to the peak, and a
peak above 90% of the device's memory warns with what each remedy would save."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from perfpredict.core.memory_advice import Levers, memory_warning  # noqa: E402
from perfpredict.core.units import GIB  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
        self.head = torch.nn.Linear(256, 4096)

    def forward(self, x):
        return self.head(self.body(x)).float().logsumexp(-1).mean()


def _train(optimizer: str):
    import perfpredict

    return perfpredict.predict(
        Net(), (torch.randn(16, 256),), device="H100-SXM", phase="training", optimizer=optimizer, top_ops=0
    )


def test_adamw_temporary_copy_is_named_not_called_activations():
    report = _train("adamw")
    m = report.memory
    trainable = sum(p.numel() for p in Net().parameters()) * 4  # float32 gradients, one per weight
    assert m.gradients_bytes == trainable
    # this small batch peaks at the optimizer step, where AdamW's multi-tensor step holds sqrt(exp_avg_sq): one more
    # trainable-sized buffer (OPTIMIZER_SCRATCH = 1); it is the optimizer's, not activations
    assert m.peak_at == "optimizer step"
    assert m.optimizer_temporaries_bytes == trainable
    assert m.activations_bytes < trainable / 10
    names = dict(m.rows())
    assert names["optimizer temporaries"] == trainable
    assert "outputs kept to the optimizer step (loss, logits)" in names
    assert sum(v for _, v in m.rows()) == m.total_bytes == pytest.approx(report.peak_memory_bytes.value)


def test_eight_bit_adamw_has_no_temporary_and_its_activations_are_the_backwards():
    report = _train("adamw-8bit")
    m = report.memory
    assert m.optimizer_temporaries_bytes == 0
    assert sum(v for _, v in m.rows()) == m.total_bytes


def test_every_output_lists_the_terms_that_sum_to_the_peak():
    from perfpredict.render.formats import fmt_bytes
    from perfpredict.render.html import render_html
    from perfpredict.render.text import render_text

    report = _train("adamw")
    for page in (render_text(report, top_ops=0, width=400), render_html(report)):
        for name, value in report.memory.rows():
            if value:
                assert f"{name} {fmt_bytes(value)}" in page
    again = type(report).from_dict(report.to_dict())
    assert again.memory == report.memory
    old = {**report.to_dict(), "schema_version": 1, "memory": dataclasses.asdict(report.memory)}  # schema 1's form
    for key in ("workspace_bytes", "optimizer_temporaries_bytes", "peak_at"):
        old["memory"].pop(key)
    assert type(report).from_dict(old).memory.total_bytes == report.memory.total_bytes  # older JSON still reads


def test_inference_peak_splits_the_conv_workspace_out():
    import perfpredict

    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3))
    report = perfpredict.predict(conv, (torch.randn(8, 3, 64, 64),), device="H100-SXM", top_ops=0)
    m = report.memory
    assert m.workspace_bytes > 0 and m.peak_at == "forward"
    assert dict(m.rows())["activations"] == m.activations_bytes
    assert sum(v for _, v in m.rows()) == m.total_bytes


def test_a_peak_above_ninety_percent_warns_with_remedies():
    terms = {
        "weights": 13.5 * GIB,
        "gradients": 13.5 * GIB,
        "optimizer state": 27 * GIB,
        "optimizer temporaries": 0,
        "activations": 20 * GIB,
    }
    levers = Levers(batch=8, dtype="bfloat16", multi_gpu=True)
    assert memory_warning(70 * GIB, 80 * GIB, "training", terms, optimizer="adamw", levers=levers) is None  # 87.5%
    text = memory_warning(77 * GIB, 80 * GIB, "training", terms, optimizer="adamw", levers=levers)
    assert "77.00 GiB of 80.00 GiB (96%): fits, but above 90%" in text
    # 2.5 GiB of activations per sample over 57 GiB of the rest: (72 - 57) // 2.5 = 6 samples, 57 + 15 = 72 GiB
    assert "--batch 6 (the activations, 20.00 GiB at batch 8, scale with it): about 72.0 GiB;" in text
    # 77 - 3/4 of 27 = 56.75 GiB
    assert "--optimizer adamw-8bit (a quarter of the optimizer state, no temporary copy): about 56.8 GiB" in text
    assert "--fsdp --dp 2 (shards the weights, gradients and optimizer state, 54.00 GiB, over 2 GPUs)" in text
    over = memory_warning(
        90 * GIB, 80 * GIB, "inference", {"weights": 60 * GIB, "activations": 28 * GIB}, levers=Levers(dtype="float32")
    )
    assert "does not fit" in over and "--dtype bfloat16" in over and "FSDP" not in over and "--tp" not in over


def test_the_report_carries_the_warning_and_says_tight():
    from perfpredict.assemble import build_report
    from perfpredict.compiler_hooks.capture import capture_graph
    from perfpredict.hardware.devices import get_device
    from perfpredict.predictors.base import RunConfig
    from perfpredict.render.text import fits_text

    graph = capture_graph(Net(), (torch.randn(16, 256),), {}, phase="training", dtype=None, name="net")
    h100 = get_device("H100-SXM")
    peak = build_report(graph, h100, RunConfig(phase="training"), "analytical").peak_memory_bytes.value
    small = dataclasses.replace(h100, memory_bytes=int(peak / 0.95), mig_profiles=())  # the peak is 95% of it
    report = build_report(graph, small, RunConfig(phase="training"), "analytical")
    assert report.fits_in_memory and report.memory_share == pytest.approx(0.95, rel=1e-3)
    assert any("fits, but above 90%" in w and "--optimizer adamw-8bit" in w for w in report.warnings)
    assert "95.0% of it: tight" in fits_text(report)


def _generation(weights_gib: float, kv_gib: float, batch: int = 8, tp: int = 1):
    from perfpredict.llm.memory_remedies import GenerationMemory

    return GenerationMemory(
        weights_bytes=weights_gib * GIB,
        layer_weights_bytes=weights_gib * GIB * 0.9,  # the embeddings and the LM head stay in bf16
        bytes_per_weight=2.0,
        kv_bytes=kv_gib * GIB,
        activations_bytes=0.0,
        runtime_bytes=0.5 * GIB,
        batch=batch,
        tp=tp,
        tp_splits=lambda n: 32 % n == 0,
        gpu=True,
    )


def test_generation_warns_when_tight_too():
    from types import SimpleNamespace

    from perfpredict.llm.generation import _memory_warnings

    l4 = SimpleNamespace(name="L4", memory_bytes=22 * GIB, kind="gpu")
    assert _memory_warnings(_generation(13.5, 5), l4, 8, 2048) == ()  # 19 GiB: 86%
    (tight,) = _memory_warnings(_generation(13.5, 7), l4, 8, 2048)  # 21 GiB: 95%
    assert "fits, but above 90%" in tight and "at most 8 sequences fit at 2048 tokens" in tight
    (over,) = _memory_warnings(_generation(13.5, 16), l4, 4, 2048)
    assert over.startswith("does not fit: needs 30.0 GiB, L4 has 22.0 GiB")
    # 19.8 GiB target: the batch of 8 holds 16 GiB of cache, 2 GiB each; (19.8 - 14) // 2 = 2 sequences, 18 GiB
    assert "--batch 2 (the KV cache and the activations scale with it): about 18.0 GiB" in over
    # int8 halves the layers' 12.15 GiB of 2-byte weights: 30 - 6.075 = 23.9 GiB
    assert "--weights int8 (the layers' weights in 1 byte each, not 2 bytes): about 23.9 GiB, not enough" in over
    # tp 2 splits the weights and the cache: 0.5 + (13.5 + 16) / 2 = 15.25 GiB per GPU
    assert "--tp 2 (splits the weights and the KV cache over 2 GPUs): about 15.2 GiB per GPU" in over


# every door and format (issue 45, item 4): ResNet-50's JSON terms summed to 1,577 MiB against its 1,332 MiB peak,
# because ``activations_peak_bytes`` held the 245 MiB ``workspace_bytes`` listed beside it. A small ResNet config has
# the same conv workspace, and predicts in a second
TINY_RESNET = {
    "model_type": "resnet",
    "architectures": ["ResNetForImageClassification"],
    "embedding_size": 8,
    "hidden_sizes": [16, 32],
    "depths": [1, 1],
    "layer_type": "bottleneck",
    "num_labels": 10,
}
_SIZE = re.compile(r"([\d,.]+) (B|KiB|MiB|GiB|TiB)\b")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _json_terms(memory: dict) -> int:
    """What a reader of the JSON adds up: every ``*_bytes`` value of a report's ``memory``."""
    return sum(v for k, v in memory.items() if k.endswith("_bytes"))


def _shown_sum(terms: str) -> float:
    """The sum of the sizes a text or HTML line lists ("weights 1.50 GiB + activations 3.0 MiB + ...")."""
    return sum(float(n.replace(",", "")) * _UNITS[unit] for n, unit in _SIZE.findall(terms))


def _check_perf_report(data: dict, pages: list[str]) -> None:
    """The JSON's terms sum to its peak exactly; each page lists the same terms, summing to the peak (to the
    three significant figures each is shown with)."""
    from perfpredict.core.report import PerfReport
    from perfpredict.render.text import memory_terms

    peak = data["peak_memory_bytes"]["value"]
    assert data["schema_version"] == 2 and data["memory"]["workspace_bytes"] > 0  # the case the issue found
    assert _json_terms(data["memory"]) == round(peak)
    report = PerfReport.from_dict(data)
    terms = memory_terms(report)
    assert _shown_sum(terms) == pytest.approx(peak, rel=5e-3)
    for page in pages:
        assert terms in page.replace("&#x27;", "'")


@pytest.fixture(scope="module")
def resnet_config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_resnet")
    (folder / "config.json").write_text(json.dumps(TINY_RESNET))
    return folder / "config.json"


def test_the_cli_json_and_text_terms_sum_to_the_peak(resnet_config, tmp_path, capsys, monkeypatch):
    from perfpredict.cli import main

    monkeypatch.setattr("perfpredict.render.text.PIPED_WIDTH", 400)  # the table's cells on one line each
    argv = ["predict", "--config", str(resnet_config), "--batch", "64", "--device", "H100-SXM"]
    assert main([*argv, "--json", str(tmp_path / "r.json")]) == 0
    _check_perf_report(json.loads((tmp_path / "r.json").read_text()), [capsys.readouterr().out])


def test_the_api_and_the_web_page_terms_sum_to_the_peak():
    import perfpredict
    from perfpredict.render.html import render_html
    from perfpredict.render.text import render_text
    from perfpredict.web.app import _downloads
    from perfpredict.web.compare import Question, compare

    answer = compare(Question(model=TINY_RESNET, devices=("H100-SXM",), batch=64))
    json_path, html_path = _downloads(answer)  # the page's downloads
    _check_perf_report(json.loads(Path(json_path).read_text()), [Path(html_path).read_text()])
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3))
    api = perfpredict.predict(conv, (torch.randn(8, 3, 64, 64),), device="H100-SXM", top_ops=0)
    text = " ".join(render_text(api, top_ops=0, width=400).split())
    _check_perf_report(json.loads(api.to_json()), [text, render_html(api)])
    train = _train("adamw")  # the optimizer step's temporaries, another part of the old activation term
    memory = json.loads(train.to_json())["memory"]
    assert memory["optimizer_temporaries_bytes"] > 0 and _json_terms(memory) == round(train.peak_memory_bytes.value)


def test_the_parallel_report_terms_sum_to_each_ranks_peak():
    import perfpredict
    from perfpredict.parallel.render import memory_lines

    report = perfpredict.predict(Net(), (torch.randn(16, 256),), phase="training", parallel={"dp": 2, "pp": 1})
    data = json.loads(report.to_json())
    totals = []
    for stage, line in zip(data["stages"], memory_lines(report)[1:]):
        totals.append(_json_terms(stage["memory"]))
        terms, total = line.split(": ", 1)[1].rsplit(" = ", 1)  # "weights 0.02 + ... = 0.54 GiB", in GiB
        shown = [float(v) for v in re.findall(r"\d+\.\d+", terms)]
        assert sum(shown) == pytest.approx(_shown_sum(total) / 2**30, abs=0.005 * len(shown))  # each to 0.01
    assert max(totals) == data["peak_memory_bytes"]
