"""Vidur's fp16 profiles: projections as GEMMs of the layer's shard, and the 70B-and-larger profiles never opened."""

from __future__ import annotations

import json

from perfpredict.external import vidur
from perfpredict.external.source_tree import SourceTree

STATS = ("min", "max", "mean", "median", "std")
OPS = (
    "emb",
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)


def _csv(tokens: int, tp: int) -> str:
    head = [f"time_stats.{op}.{s}" for op in OPS for s in STATS]
    head += [
        "n_head",
        "n_kv_head",
        "n_embd",
        "n_expanded_embd",
        "vocab_size",
        "use_gated_mlp",
        "num_tokens",
        "num_tensor_parallel_workers",
    ]
    values = ["0.5"] * (len(OPS) * len(STATS)) + ["32", "8", "4096", "14336", "128256", "True", str(tokens), str(tp)]
    return ",".join(head) + "\n" + ",".join(values) + "\n"


class Recording(SourceTree):
    """A source tree that remembers which files were read."""

    read: list

    def read_text(self, path: str) -> str:
        self.read.append(path)
        return super().read_text(path)


def _tree(tmp_path) -> Recording:
    for gpu, model in (
        ("h100", "meta-llama/Meta-Llama-3-8B"),
        ("a100", "meta-llama/Llama-2-70b-hf"),
        ("a100", "Qwen/Qwen-72B"),
    ):
        folder = tmp_path / vidur.COMPUTE / gpu / model
        folder.mkdir(parents=True)
        (folder / "mlp.csv").write_text(_csv(4096, 2))
    tree = Recording(tmp_path)
    object.__setattr__(tree, "read", [])
    return tree


def test_held_out_models_are_never_read(tmp_path):
    tree = _tree(tmp_path)
    rows = list(vidur.convert(tree))
    assert tree.read == [f"{vidur.COMPUTE}/h100/meta-llama/Meta-Llama-3-8B/mlp.csv"]
    assert {r["model"] for r in rows} == {"meta-llama/Meta-Llama-3-8B"}
    assert vidur.held_out("x/Llama-2-70b-hf/mlp.csv") and vidur.held_out("x/Qwen-72B/mlp.csv")
    assert not vidur.held_out("x/CodeLlama-34b-Instruct-hf/mlp.csv") and not vidur.held_out("x/a100/Llama-2-7b-hf/m")


def test_projections_are_the_shards_gemms(tmp_path):
    rows = {r["source_op"]: r for r in vidur.convert(_tree(tmp_path))}
    qkv, up, down = rows["attn_pre_proj"], rows["mlp_up_proj"], rows["mlp_down_proj"]
    # tp 2: 16 query heads and 4 KV heads of 128 -> 16*128 + 2*4*128 = 3072 outputs
    assert json.loads(qkv["out_shape"]) == [4096, 3072] and qkv["flops"] == 2 * 4096 * 4096 * 3072
    assert json.loads(up["out_shape"]) == [4096, 2 * 7168]  # gate and up together: 2 x 14336 / 2
    assert down["flops"] == 2 * 4096 * 7168 * 4096
    assert {r["dtype"] for r in rows.values()} == {"float16"} and qkv["device"] == "H100-SXM"
    act = rows["mlp_act"]  # SiLU-and-mul reads both halves and writes one
    assert act["in_bytes"] == 2 * 4096 * 14336 and act["out_bytes"] == 2 * 4096 * 7168
