"""The HuggingFace frontend: shipped configs load, build on the meta device, and capture with torch.compile."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from perfpredict.compiler_hooks import hf_frontend as hf  # noqa: E402
from perfpredict.core.errors import InvalidInputError, UnknownModelError  # noqa: E402

SHIPPED = hf.known_models()


def _param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_index_points_at_existing_files() -> None:
    index = json.loads((hf.CONFIG_DIR / "index.json").read_text())
    assert len(index["models"]) >= 15
    for model_id, entry in index["models"].items():
        assert (hf.CONFIG_DIR / entry["file"]).is_file(), model_id
        assert entry["input"] in ("text", "vision")
    for alias, model_id in index["aliases"].items():
        assert model_id in index["models"], alias


@pytest.mark.parametrize("model_id", SHIPPED)
def test_every_shipped_config_builds_on_meta(model_id: str) -> None:
    model = hf.build_model(model_id)
    params = list(model.parameters())
    assert params and all(p.device.type == "meta" for p in params)
    assert not model.training


# Published parameter counts (model cards / papers), to catch a wrong hyper-parameter in a shipped config.
@pytest.mark.parametrize(
    "model_id, params_m",
    [
        ("bert-base-uncased", 109.5),
        ("bert-large-uncased", 335.1),
        ("gpt2", 124.4),
        ("roberta-base", 124.6),
        ("meta-llama/Llama-2-7b-hf", 6738.4),
        ("mistralai/Mistral-7B-v0.1", 7241.7),
        ("Qwen/Qwen2-0.5B", 494.0),
        ("meta-llama/Llama-2-70b-hf", 68976.6),
        ("meta-llama/Meta-Llama-3-8B", 8030.3),
        ("meta-llama/Meta-Llama-3-70B", 70553.7),
        ("mistralai/Mixtral-8x7B-v0.1", 46702.8),
        ("Qwen/Qwen2-7B", 7615.6),
        ("Qwen/Qwen2-72B", 72706.2),
        ("microsoft/resnet-50", 25.6),
        ("google/vit-base-patch16-224", 86.6),
        ("google/efficientnet-b0", 5.3),
    ],
)
def test_parameter_counts_match_the_real_models(model_id: str, params_m: float) -> None:
    assert _param_count(hf.build_model(model_id)) / 1e6 == pytest.approx(params_m, abs=0.1)


def test_aliases_and_causal_lm_settings() -> None:
    config = hf.load_config("llama-2-7b")
    assert config.name_or_path == "meta-llama/Llama-2-7b-hf"
    assert hf.load_config("T5").name_or_path == "google-t5/t5-base"
    model = hf.build_model("gpt2", dtype="bfloat16")
    assert model.config.use_cache is False
    assert next(model.parameters()).dtype == torch.bfloat16
    assert type(hf.build_model("t5-base")).__name__ == "T5EncoderModel"


def _capture(model, inputs):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend=backend)(*inputs)
    return graphs, out


@pytest.mark.parametrize(
    "model_id, batch, seq, out_shape",
    [
        ("bert-base-uncased", 2, 16, (2, 16, 768)),  # last_hidden_state
        ("microsoft/resnet-50", 2, None, (2, 1000)),  # logits over 1000 ImageNet classes
    ],
)
def test_torch_compile_captures_on_meta(model_id: str, batch: int, seq: int | None, out_shape: tuple) -> None:
    model, inputs, name = hf.model_from_hf(model_id, batch_size=batch, seq_len=seq)
    assert name == model_id
    graphs, out = _capture(model, inputs)
    assert len(graphs) == 1  # one graph, no graph breaks
    assert tuple(out[0].shape) == out_shape and out[0].device.type == "meta"


def test_example_inputs_shapes_and_dtypes() -> None:
    (ids,) = hf.example_inputs(hf.load_config("bert-base"), 4, 64)
    assert ids.shape == (4, 64) and ids.dtype == torch.long and ids.device.type == "meta"
    (ids,) = hf.example_inputs(hf.load_config("llama-2-7b"), 1)
    assert ids.shape == (1, 512)  # the shipped default sequence for LLMs
    (pixels,) = hf.example_inputs(hf.load_config("vit-base"), 2, dtype="float16")
    assert pixels.shape == (2, 3, 224, 224) and pixels.dtype == torch.float16


def test_sequence_limits() -> None:
    with pytest.raises(InvalidInputError, match=r"sequence length 1025 .*1024 positions"):
        hf.example_inputs(hf.load_config("gpt2"), 1, 1025)
    # RoBERTa's 514 position embeddings hold 512 tokens (positions start after the padding index).
    hf.example_inputs(hf.load_config("roberta-base"), 1, 512)
    with pytest.raises(InvalidInputError, match="512 positions"):
        hf.example_inputs(hf.load_config("roberta-base"), 1, 513)
    with pytest.raises(InvalidInputError, match="vision model"):
        hf.example_inputs(hf.load_config("resnet-50"), 1, 128)


@pytest.mark.parametrize("batch", [0, -3, 1.5, True])
def test_bad_batch(batch) -> None:
    with pytest.raises(InvalidInputError, match="batch size must be a positive integer"):
        hf.example_inputs(hf.load_config("bert-base"), batch, 16)


def test_bad_dtype() -> None:
    with pytest.raises(InvalidInputError, match="unsupported dtype 'int7'; choose one of float32"):
        hf.model_from_hf("bert-base", 1, 16, dtype="int7")


def test_unknown_id_lists_close_ids_and_the_config_option() -> None:
    with pytest.raises(UnknownModelError) as info:
        hf.load_config("bert-base-uncasedd")
    message = str(info.value)
    assert "'bert-base-uncasedd'" in message and "bert-base-uncased" in message
    assert "--config path/to/config.json" in message


def test_user_config_file(tmp_path) -> None:
    data = json.loads((hf.CONFIG_DIR / "bert-base-uncased.json").read_text())
    data.update(num_hidden_layers=2, architectures=["BertForMaskedLM"])
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    for where in (path, path.parent, str(path)):
        config = hf.load_config(where)
        assert config.num_hidden_layers == 2 and config.name_or_path == str(path)
    model, (ids,), name = hf.model_from_hf(str(path), 2, 8)
    assert type(model).__name__ == "BertModel"  # the pre-training head is dropped
    assert name == str(path) and ids.shape == (2, 8)
    with pytest.raises(InvalidInputError, match="does not exist"):
        hf.load_config(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InvalidInputError, match="cannot read"):
        hf.load_config(tmp_path / "bad.json")
    (tmp_path / "nomodel.json").write_text('{"hidden_size": 8}')
    with pytest.raises(UnknownModelError, match="model_type"):
        hf.load_config(tmp_path / "nomodel.json")
