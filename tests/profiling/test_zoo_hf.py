"""The transformers families are field maps: a spec's parameters land in the named config fields, and the auto
class builds the family's task model. The measured datasets pin what every architecture builds."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from perfpredict.profiling import zoo
from perfpredict.profiling.zoo_hf import HfModel

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
DATASETS = sorted([*REPO.glob("data/*/rows.parquet"), *REPO.glob("data/v3/*/rows.parquet")])


def _measured_archs() -> dict[str, int]:
    """Every arch key the committed datasets measured, with the parameter count the collector recorded."""
    archs: dict[str, int] = {}
    for path in DATASETS:
        rows = pd.read_parquet(path, columns=["arch_key", "param_count"]).drop_duplicates("arch_key")
        archs.update(zip(rows.arch_key, rows.param_count.astype(int)))
    return archs


def test_every_measured_architecture_still_builds_the_measured_model():
    # A changed key or builder would orphan measured rows: each key must parse, keep its text, and build (on
    # meta) a model with the parameter count recorded when it was measured.
    archs = _measured_archs()
    assert len(archs) > 100 and {json.loads(k)["family"] for k in archs} == set(zoo.list_families())
    wrong = {}
    for key, recorded in archs.items():
        data = json.loads(key)
        fam = zoo.get_family(data["family"])
        spec = zoo.ModelSpec(data["family"], data["params"], seq=32 if fam.needs_seq else None)
        assert spec.arch_key() == key
        built = sum(p.numel() for p in spec.build("meta").parameters())
        if built != recorded:
            wrong[key] = (recorded, built)
    assert not wrong, f"(recorded, built) parameter counts differ: {wrong}"


@pytest.mark.parametrize("family", [f for f in zoo.list_families() if zoo.get_family(f).source == "transformers"])
def test_field_map_fills_the_config_from_the_spec(family):
    fam = zoo.get_family(family)
    assert isinstance(fam.build, HfModel)
    params = zoo.smallest_spec(family).params
    cfg = fam.build.make_config(params)
    assert type(cfg).__name__ == fam.build.config
    for name, source in fam.build.fields.items():
        expected = params[source] if isinstance(source, str) else source(params)
        assert getattr(cfg, name) == expected, name


def test_field_map_values_follow_the_spec():
    base = zoo.smallest_spec("bert").params
    cfg = zoo.get_family("bert").build.make_config({**base, "hidden": 64, "expansion": 3})
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_labels) == (64, 192, zoo.NUM_LABELS)
    gpt2 = zoo.get_family("gpt2").build.make_config({**base, "hidden": 48, "expansion": 4})
    assert (gpt2.n_embd, gpt2.n_inner, gpt2.use_cache) == (48, 192, False)
    t5 = zoo.get_family("t5_encoder").build.make_config({**base, "hidden": 64, "heads": 4})
    assert t5.d_kv == 16


def test_config_lists_are_not_shared_with_the_spec():
    fam = zoo.get_family("resnet")
    params = zoo.smallest_spec("resnet").params
    cfg = fam.build.make_config(params)
    cfg.depths.append(9)
    assert params["depths"] == [1, 1]
    assert fam.build.make_config(params).depths == [1, 1]


@pytest.mark.parametrize(
    "family, model_class",
    [
        ("deit", "DeiTForImageClassification"),  # not the distillation-teacher variant
        ("t5_encoder", "T5EncoderModel"),  # wrapped in the zoo's classification head
        ("llama", "LlamaForCausalLM"),
        ("roberta", "RobertaForSequenceClassification"),
        ("efficientnet", "EfficientNetForImageClassification"),
    ],
)
def test_auto_class_builds_the_task_model(family, model_class):
    model = zoo.smallest_spec(family).build("meta")
    inner = getattr(model, "body", model)
    assert type(inner).__name__ == model_class


def test_efficientnet_head_width_follows_the_width_multiplier():
    params = zoo.smallest_spec("efficientnet").params
    narrow = zoo.get_family("efficientnet").build.make_config(params).hidden_dim
    wide = zoo.get_family("efficientnet").build.make_config({**params, "width_mult": 1.0}).hidden_dim
    assert narrow < wide == 1280


def test_family_source_and_params_come_from_the_table():
    assert zoo.get_family("bert").source == "transformers" and zoo.get_family("vgg").source == "torch"
    assert zoo.get_family("llama").params == ("expansion", "heads", "hidden", "layers", "vocab", "kv_heads")
    for name in zoo.list_families():
        assert set(zoo.get_family(name).params) == set(zoo.smallest_spec(name).params)
