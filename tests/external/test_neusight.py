"""NeuSight's op rows: the shapes, FLOPs and bytes of each op, rebuilt from their dimension columns."""

from __future__ import annotations

import json

import pytest

from perfpredict.external import neusight
from perfpredict.external.source_tree import SourceTree
from perfpredict.profiling.op_instances import OpInstance

HEADER = "OPName,Latency,Device,Torch Version,CUDNN Version,Kernel Name,Warps per SM,Blocks per SM,Grid x,Grid y,Grid z,Block x,Block y,Block z,CUDA Version"
KERNEL = ",p2.1.0,8902,k,1,1,1,1,1,1,1,1,cu121"


def _tree(tmp_path) -> SourceTree:
    """A slice of NeuSight's dataset folder, in its own layout and columns."""
    base = tmp_path / neusight.DATASET
    (base / "train/collect/bmm/p2.1.0").mkdir(parents=True)
    (base / "train/collect/bmm/p2.1.0/Tesla T4.csv").write_text(
        f"{HEADER},Kernels,B,M,N,K\nbmm,0.5,Tesla T4{KERNEL},;k,13,27,15,29\n"
    )
    (base / "train/collect/add/p2.1.0").mkdir(parents=True)
    (base / "train/collect/add/p2.1.0/Tesla T4.csv").write_text(f"{HEADER},B,H\nadd,0.03,Tesla T4{KERNEL},127,168\n")
    (base / "train/collect/add.csv").write_text(f"{HEADER},B,H\nadd,9.9,Tesla T4{KERNEL},1,1\n")  # merged: skipped
    (base / "test").mkdir(parents=True)
    (base / "test/bmm.csv").write_text(f"{HEADER},Kernels,B,M,N,K\n")
    (base / "test/linear.csv").write_text(
        f"{HEADER},Kernels,B,M,N,K\nlinear,1.5,NVIDIA L4{KERNEL},;k,8,512,1024,4096\n"
    )
    (base / "test/elem.csv").write_text(f"{HEADER},B,H,large\ngelu,0.8,NVIDIA L4{KERNEL},16384,1024,True\n")
    (base / "test/ln.csv").write_text(f"{HEADER},B,H,large\nln,0.9,NVIDIA L4{KERNEL},16384,1024,True\n")
    (base / "test/softmax.csv").write_text(f"{HEADER},B,H,large\nsoftmax,0.7,NVIDIA L4{KERNEL},8192,2048,True\n")
    return SourceTree.open(tmp_path)


@pytest.fixture
def converted(tmp_path):
    from perfpredict.external.convert import catalog_name

    return {r["source_op"]: r for r in neusight.convert(_tree(tmp_path), catalog_name)}


def test_every_op_file_becomes_rows_and_merged_files_are_skipped(converted):
    assert set(converted) == {"bmm", "add", "linear", "gelu", "ln", "softmax"}
    assert converted["add"]["device_ms"] == 0.03  # the per-GPU file, not the merged add.csv (9.9)
    assert converted["bmm"]["device"] == "T4" and converted["linear"]["device"] == "L4"
    assert converted["bmm"]["source_split"] == "train" and converted["linear"]["source_split"] == "test"


def test_matmul_flops_and_bytes_follow_the_frontends_rules(converted):
    bmm = converted["bmm"]  # torch.bmm([B,M,N], [B,N,K]): N is the contraction
    assert bmm["flops"] == 2 * 13 * 27 * 15 * 29
    assert bmm["in_bytes"] == 4 * (13 * 27 * 15 + 13 * 15 * 29) and bmm["out_bytes"] == 4 * 13 * 27 * 29
    linear = converted["linear"]  # nn.Linear(1024, 4096) on [8, 512, 1024]; the bias add is not counted
    assert linear["flops"] == 2 * 8 * 512 * 1024 * 4096
    assert json.loads(linear["out_shape"]) == [8, 512, 4096]
    assert converted["gelu"]["flops"] == 8 * 16384 * 1024  # ops.ELEMENTWISE_FLOPS_PER_ELEMENT["gelu"] = 8


@pytest.mark.parametrize("op", ["bmm", "add", "linear", "gelu", "ln", "softmax"])
def test_keys_rebuild_the_timed_op(converted, op):
    row = converted[op]
    out = OpInstance.from_key(row["key"]).build("meta")()
    first = out[0] if isinstance(out, tuple) else out
    assert list(first.shape) == json.loads(row["out_shape"])


def test_e2e_table_keeps_labels_and_peer_predictions(tmp_path):
    summary = tmp_path / "scripts/asplos/summary"
    summary.mkdir(parents=True)
    cols = ["model_name", "seqlen", "batch", "device", "mode", "option", "OOD"]
    values = ["label", "neusight", "roofline", "habitat"]
    extra = [f"{v}_all_{p}_latency" for v in values for p in ("e2e", "fw", "bwall")]
    (summary / "summary.csv").write_text(
        ",".join(cols + extra)
        + "\n"
        + ",".join(["bert_large", "512", "8", "NVIDIA_L4", "inf", "", "True"])
        + ","
        + ",".join(str(100 + i) for i in range(len(extra)))
        + "\n"
    )
    (row,) = neusight.e2e_table(SourceTree.open(tmp_path))
    assert row["label_e2e_ms"] == 100.0 and row["neusight_e2e_ms"] == 103.0 and row["device"] == "NVIDIA_L4"


@pytest.mark.parametrize(
    "model, model_class, flags",
    [
        ("switchxl4", "AutoModelForSeq2SeqLM", []),  # encoder and decoder, the decoder on as many tokens
        ("bert_large", "AutoModelForPreTraining", ["--training", "--optimizer", "none"]),  # MLM and NSP heads
    ],
)
def test_the_cli_asks_what_neusights_table_ran_and_gets_the_python_paths_answer(model, model_class, flags, capsys):
    """NeuSight's rows through the CLI (--model-class, --attn-implementation eager, fp32, no optimizer step in
    training) give the graph and the latency its Python path gives (external.neusight_models, as the benchmark
    captures them): the same FLOPs to the FLOP and the same milliseconds."""
    from perfpredict.cli import main
    from perfpredict.external import neusight_models
    from perfpredict.graph_report import report_for_graph

    phase = "training" if "--training" in flags else "inference"
    graph = neusight_models.capture(model, 2, 128, phase)
    want = report_for_graph(graph, device="H100-SXM", optimizer="none")
    config = neusight_models.CONFIGS / f"{model}.json"
    args = ["predict", "--config", str(config), "--model-class", model_class, "--attn-implementation", "eager"]
    args += ["--dtype", "float32", "--batch", "2", "--seq", "128", "--device", "H100-SXM", "--json", "-", *flags]
    main([*args, "--no-cache"])
    got = json.loads(capsys.readouterr().out)
    assert got["graph"]["total_flops"] == graph.total_flops
    assert got["latency_ms"]["value"] == pytest.approx(want.latency_ms.value, rel=1e-9)
    # without the head NeuSight ran, the CLI builds the config's declared one: another graph
    main([*args[:3], *args[5:], "--no-cache"])
    assert json.loads(capsys.readouterr().out)["graph"]["total_flops"] != graph.total_flops
