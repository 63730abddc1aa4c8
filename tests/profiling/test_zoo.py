"""The model zoo: every family builds and runs at its smallest size; specs round-trip; bad specs fail clearly."""

from __future__ import annotations

import json
import random

import pytest
import torch

from perfpredict.core.errors import InvalidInputError
from perfpredict.profiling import zoo

pytest.importorskip("transformers")


def test_at_least_twenty_families():
    families = zoo.list_families()
    assert len(families) >= 20
    for needed in (
        "bert",
        "roberta",
        "distilbert",
        "deberta_v2",
        "gpt2",
        "llama",
        "mistral",
        "qwen2",
        "t5_encoder",
        "vit",
        "deit",
        "swin",
        "convnext",
        "resnet",
        "efficientnet",
        "mobilenet_v2",
        "regnet",
        "poolformer",
        "vgg",
        "densenet",
        "mnasnet",
        "mlp",
    ):
        assert needed in families


@pytest.mark.parametrize("family", zoo.list_families())
def test_family_builds_and_runs_forward_at_smallest_size(family):
    spec = zoo.smallest_spec(family)
    model = spec.build()
    x, labels = spec.inputs()
    out = zoo.make_step(model, x, labels, "inference")()
    logits = getattr(out, "logits", out)
    assert torch.isfinite(logits.float()).all()
    assert logits.shape[0] == 1


@pytest.mark.parametrize("family", ["bert", "llama", "resnet", "mlp"])
def test_training_step_updates_weights(family):
    spec = zoo.smallest_spec(family, phase="training")
    model = spec.build()
    x, labels = spec.inputs()
    before = [p.detach().clone() for p in model.parameters()]
    loss = zoo.make_step(model, x, labels, "training")()
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_build_is_deterministic_and_dtype_is_applied():
    spec = zoo.smallest_spec("gpt2", dtype="bfloat16")
    a, b = spec.build(), spec.build()
    for p, q in zip(a.parameters(), b.parameters()):
        assert p.dtype == torch.bfloat16 and torch.equal(p, q)
    meta = spec.build("meta")
    assert next(meta.parameters()).is_meta


def test_spec_json_round_trip():
    for family in zoo.list_families():
        for spec in list(zoo.family_plan(family, archs=2, batches=(1, 8)))[:4]:
            key = spec.to_key()
            assert "\n" not in key
            assert zoo.ModelSpec.from_key(key) == spec
            assert zoo.ModelSpec.from_key(key).to_key() == key
            assert zoo.ModelSpec.from_key(json.loads(key)) == spec


def test_sampling_is_seeded_and_round_robin_spans_families():
    first = [s.to_key() for s in zoo.sample_specs(seed=3, archs=2)][:200]
    again = [s.to_key() for s in zoo.sample_specs(seed=3, archs=2)][:200]
    other = [s.to_key() for s in zoo.sample_specs(seed=4, archs=2)][:200]
    assert first == again and first != other
    n = len(zoo.list_families())
    assert {json.loads(k)["family"] for k in first[:n]} == set(zoo.list_families())
    assert zoo.sample_arch("bert", random.Random(1)) == zoo.sample_arch("bert", random.Random(1))


def test_plan_sweeps_batches_phases_and_dtypes():
    specs = list(zoo.family_plan("vit", archs=1, device="cuda", profile="gpu"))
    assert {s.phase for s in specs} == {"inference", "training"}
    assert {s.dtype for s in specs} == {"float32", "float16", "bfloat16"}
    assert min(s.batch for s in specs) == 1 and max(s.batch for s in specs) == 512
    text = list(zoo.family_plan("llama", archs=20, profile="gpu"))
    assert all(32 <= s.seq <= 4096 for s in text)


def test_unknown_family_lists_valid_ones():
    with pytest.raises(InvalidInputError, match="unknown model family 'bertt'.*did you mean bert.*valid families"):
        zoo.ModelSpec("bertt", {})


@pytest.mark.parametrize(
    "key, match",
    [
        ("not json", "is not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"family": "mlp"}', "needs 'family' and 'params'"),
        ('{"family": "mlp", "params": {}, "colour": 1}', "unexpected: \\['colour'\\]"),
        ('{"family": "mlp", "params": {"in_dim": 4}}', "missing \\["),
        (
            '{"family": "bert", "params": {"hidden": 32, "layers": 1, "heads": 2, "expansion": 2, "vocab": 9}}',
            "seq must be a positive integer",
        ),
        (
            '{"family": "vit", "params": {"hidden": 32, "layers": 1, "heads": 2, "expansion": 2, "image": 32, "patch": 8},'
            ' "seq": 64}',
            "seq must be null",
        ),
        (
            '{"family": "mlp", "params": {"in_dim": 16, "width": 32, "layers": 1, "activation": "relu", '
            '"layernorm": false}, "batch": 0}',
            "batch 0 must be a positive integer",
        ),
        (
            '{"family": "mlp", "params": {"in_dim": 16, "width": 32, "layers": 1, "activation": "relu", '
            '"layernorm": false}, "dtype": "int8"}',
            "dtype 'int8' is not one of",
        ),
        (
            '{"family": "mlp", "params": {"in_dim": 16, "width": 32, "layers": 1, "activation": "relu", '
            '"layernorm": false}, "phase": "eval"}',
            "phase 'eval' is not one of",
        ),
    ],
)
def test_malformed_spec_errors(key, match):
    with pytest.raises(InvalidInputError, match=match):
        zoo.ModelSpec.from_key(key)


def test_graph_corpus_is_deterministic_and_large(tmp_path):
    from perfpredict.profiling import corpus

    path = corpus.write_corpus(tmp_path, n=10_000, seed=0)
    again = corpus.write_corpus(tmp_path / "again", n=10_000, seed=0)
    assert path.read_bytes() == again.read_bytes()
    specs = corpus.load_corpus_specs(path)
    assert len(specs) == 10_000 and len({s.to_key() for s in specs}) > 9_000
    assert {s.family for s in specs} == set(zoo.list_families())
    # regenerate a small slice: the mlp specs trace fastest
    mlps = [s for s in specs if s.family == "mlp"][:2]
    graphs = list(corpus.corpus_graphs(mlps))
    assert len(graphs) == 2 and all(len(g.nodes) > 0 and g.total_flops > 0 for _, g in graphs)


@pytest.mark.parametrize("profile", zoo.PROFILES)
def test_every_profile_samples_valid_specs(profile):
    for family in zoo.list_families():
        specs = list(zoo.family_plan(family, archs=5, profile=profile, batches=(1,)))
        assert len(specs) == 5 * 2 * 2
        assert all(zoo.ModelSpec.from_key(s.to_key()) == s for s in specs)


def test_tiny_profile_builds_a_training_step_at_batch_one():
    # batch-1 training with BatchNorm needs feature maps larger than 1x1: every tiny conv image is >= 64 px
    for family in ("efficientnet", "regnet", "mnasnet", "swin"):
        spec = next(iter(zoo.family_plan(family, archs=1, profile="tiny", phases=("training",), batches=(1,))))
        model = spec.build()
        x, labels = spec.inputs()
        assert torch.isfinite(zoo.make_step(model, x, labels, "training")())
