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


def test_the_network_profiles_convert_with_their_layout_and_duplicates_marked(tmp_path):
    from perfpredict.external import vidur_network

    head = (
        ",time_stats.{k}.min,time_stats.{k}.max,time_stats.{k}.mean,time_stats.{k}.median,time_stats.{k}.std,"
        "rank,num_workers,size,collective,devices_per_node,max_devices_per_node\n"
    )
    rows = {
        "a100_dgx/all_reduce.csv": head.format(k="all_reduce")
        + "0,0.03,0.07,0.05,0.043,0.02,0,16,2048,all_reduce,8,8\n",
        "a100_pairwise_nvlink/send_recv.csv": head.format(k="send_recv")
        + "0,0.01,0.02,0.015,0.012,0.001,0,2,4096,send_recv,1,4\n",
        "a40_pairwise_nvlink/all_reduce.csv": "",  # empty in Vidur's repository
    }
    rows["h100_pairwise_nvlink/send_recv.csv"] = rows["a100_pairwise_nvlink/send_recv.csv"]  # a byte copy
    for path, text in rows.items():
        target = tmp_path / vidur_network.NETWORK / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    out = {(r["system"], r["collective"]): r for r in vidur_network.convert(SourceTree(tmp_path))}
    assert set(out) == {("a100_dgx", "all_reduce"), ("a100_pairwise_nvlink", "send_recv"),
                        ("h100_pairwise_nvlink", "send_recv")}  # fmt: skip
    ar = out[("a100_dgx", "all_reduce")]
    assert (ar["ranks"], ar["ranks_per_node"], ar["nodes"], ar["size_bytes"]) == (16, 8, 2, 2048)
    assert (ar["min_ms"], ar["median_ms"], ar["max_ms"], ar["device"]) == (0.03, 0.043, 0.07, "A100-80GB")
    copy = out[("h100_pairwise_nvlink", "send_recv")]
    assert copy["duplicate_of"].endswith("a100_pairwise_nvlink/send_recv.csv")
    assert out[("a100_pairwise_nvlink", "send_recv")]["duplicate_of"] == ""
    assert (copy["ranks_per_node"], copy["nodes"]) == (1, 2)  # one GPU on each of two nodes
