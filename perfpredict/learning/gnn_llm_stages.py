"""Stages 1 and 2 of ``gnn_llm`` training (stage 3, supervised fine-tuning, is the shared GNN training loop).

Stage 1 pretrains the GIN with GraphMAE on the unlabelled graph corpus (the first ``stage1_corpus`` specs of
``data/graph_corpus``, traced through the graph cache), and standardises node features with the corpus's own
statistics, so the encoder does not depend on the labelled rows and one cached copy (keyed by the spec keys and
hyper-parameters, under the graph cache's folder) serves every fold, ablation and adaptation run. Without a corpus it falls back to the training rows' graphs and says so in the info.

Stage 2 aligns the graph token with the LM: the GIN is frozen; the projection, the markers and LoRA learn from
(graph, generated summary) pairs. Encoder LMs: symmetric InfoNCE between the LM's state at ``<pred>`` after
``<graph> [g] </graph>`` and its mean-pooled embedding of the summary (how all-MiniLM-L6-v2 embeds sentences).
Causal LMs: next-token loss on the summary, read after the graph block.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perfpredict.predictors.gnn_data import GRAPHS, NODE_FEATURES, Standardizer
from perfpredict.progress import Progress, in_fits

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

MIN_CORPUS_GRAPHS = 8
SUMMARY_TOKENS = 128


def _corpus_specs(hp: dict[str, Any]) -> list[Any]:
    """The first ``stage1_corpus`` specs of the committed graph corpus (reading them traces nothing)."""
    from perfpredict.profiling import corpus

    n = int(hp["stage1_corpus"] or 0)
    path = Path(hp["corpus_path"] or corpus.DEFAULT_DIR / corpus.SPECS_FILE)
    return corpus.load_corpus_specs(path)[:n] if n > 0 and path.exists() else []


def _corpus_graphs(specs: list[Any], kind: str) -> tuple[list[Any], list[np.ndarray]]:
    """Cost arrays and raw node matrices of the corpus graphs that trace (others are skipped)."""
    from perfpredict.learning.training_data import GraphCache
    from perfpredict.predictors.cost_arrays import CostArrays

    cache = GraphCache()
    arrays, nodes = [], []
    for spec in specs:
        try:
            a = CostArrays.from_graph(cache.graph(spec))
        except Exception as err:  # noqa: BLE001 - an untraceable corpus spec is skipped, not fatal
            logger.info("perfpredict: skipping corpus spec %s (%s)", spec.to_key()[:80], err)
            continue
        if len(a.graph.nodes) > 1:
            arrays.append(a)
            nodes.append(GRAPHS.node_matrix(a, float(spec.batch), kind))
    return arrays, nodes


def stage1_encoder(
    hp: dict[str, Any], kind: str, seed: int, fallback: list[tuple[Any, float, str]] | None = None
) -> tuple[dict[str, torch.Tensor], Standardizer, dict[str, Any]]:
    """The GraphMAE-pretrained GIN state, the node standardiser it was trained with, and what it was trained on."""
    import torch

    from perfpredict.caching.disk_store import cache_root
    from perfpredict.learning.graphmae import corpus_key, load_state, pretrain_graphmae, save_state

    specs = _corpus_specs(hp)
    source, keys = "graph corpus", [spec.to_key() for spec in specs]
    arrays: list[Any] = []
    nodes: list[np.ndarray] = []
    if len(specs) < MIN_CORPUS_GRAPHS and fallback:
        source = "training graphs (no graph corpus found)"
        seen: dict[int, tuple[Any, float]] = {}
        for a, b, _ in fallback:
            seen.setdefault(id(a), (a, b))
        arrays = [a for a, _ in seen.values()]
        nodes = [GRAPHS.node_matrix(a, b, kind) for a, b in seen.values()]
        keys = [a.graph.structure_hash() for a in arrays]
        specs = []
    mae = {
        "hidden": hp["gin_hidden"],
        "layers": hp["gin_layers"],
        "epochs": hp["stage1_epochs"],
        "lr": hp["stage1_lr"],
        "batch": hp["stage1_batch"],
        "mask_rate": hp["mask_rate"],
        "gamma": hp["sce_gamma"],
    }
    key = corpus_key(keys, {**mae, "kind": kind, "seed": seed}, list(NODE_FEATURES))
    file = cache_root() / "gnn_llm_stage1" / f"{key}.safetensors"
    if file.exists():
        try:
            state, info = load_state(file.read_bytes())
            return state, Standardizer.from_json(info.pop("node_std")), {**info, "cached": True}
        except (OSError, ValueError, KeyError) as err:
            logger.warning("perfpredict: ignoring a damaged stage-1 cache %s (%s)", file, err)
    if specs:  # NB: only now, on a cache miss: loading hundreds of corpus graphs takes minutes
        arrays, nodes = _corpus_graphs(specs, kind)
    std = Standardizer.fit(nodes) if nodes else Standardizer(np.zeros(len(NODE_FEATURES)), np.ones(len(NODE_FEATURES)))
    graphs = [(torch.from_numpy(std(m)), GRAPHS.edge_index(a)) for m, a in zip(nodes, arrays)]
    state, info = pretrain_graphmae(graphs, len(NODE_FEATURES), mae, seed)
    info = {**info, "source": source, "key": key}
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    tmp.write_bytes(save_state(state, {**info, "node_std": std.to_json()}))
    tmp.replace(file)
    return state, std, {**info, "cached": False}


def _distinct_graphs(keys: list[tuple[Any, float, str]], limit: int) -> list[tuple[Any, float, str]]:
    seen: set[int] = set()
    out = []
    for a, b, k in keys:
        if id(a) not in seen:
            seen.add(id(a))
            out.append((a, b, k))
    return out[:limit]


def stage2_align(
    net: Any, lm: Any, hp: dict[str, Any], node_std: Standardizer, keys: list[tuple[Any, float, str]], seed: int
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train ``net``'s projection, markers and LoRA to tie the graph token to the graph's summary; GIN frozen.

    The learner builds ``net`` (its GIN already holding stage 1's weights) on ``lm``, its base model, and passes
    them in: this module trains what it is given and imports nothing of the learner.
    """
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader

    from perfpredict.predictors.lm_prompts import graph_summary

    t0 = time.monotonic()
    graphs = _distinct_graphs(keys, int(hp["stage2_max_graphs"]))
    enc = lm.tokenizer(
        [graph_summary(a, b) for a, b, _ in graphs],
        add_special_tokens=not lm.causal,
        padding=True,
        truncation=True,
        max_length=SUMMARY_TOKENS,
        return_tensors="pt",
    )
    data = [
        Data(
            x=torch.from_numpy(node_std(GRAPHS.node_matrix(a, b, k))),
            edge_index=GRAPHS.edge_index(a),
            idx=torch.tensor([i]),
        )
        for i, (a, b, k) in enumerate(graphs)
    ]
    for p in net.gin.parameters():
        p.requires_grad_(False)
    train = [p for n, p in net.named_parameters() if p.requires_grad and not n.startswith("head.")]
    opt = torch.optim.AdamW(train, lr=hp["stage2_lr"], weight_decay=1e-4)
    losses: list[float] = []
    gen = torch.Generator().manual_seed(seed * 1000 + 31)
    epochs = int(hp["stage2_epochs"]) if len(data) > 1 else 0
    for _ in Progress("GNN+LLM stage 2", epochs, unit="epochs", enabled=in_fits()).track(range(epochs)):
        net.train()
        net.gin.eval()  # NB: frozen means frozen batch-norm statistics too
        run, count = 0.0, 0
        for b in DataLoader(data, batch_size=int(hp["stage2_batch"]), shuffle=True, generator=gen):
            if b.num_graphs < 2 and not lm.causal:
                continue  # a contrastive batch needs negatives
            opt.zero_grad()
            loss = _step_loss(
                net,
                b,
                enc["input_ids"][b.idx],
                enc["attention_mask"][b.idx],
                lm.causal,
                float(hp["stage2_temperature"]),
            )
            loss.backward()
            torch.nn.utils.clip_grad_norm_(train, 5.0)
            opt.step()
            run += float(loss.detach()) * b.num_graphs
            count += b.num_graphs
        losses.append(run / max(count, 1))
    state = {
        k: v.detach().clone()
        for k, v in net.state_dict().items()
        if k.startswith("proj.") or k == "markers" or "lora_" in k
    }
    objective = "next-token" if lm.causal else "contrastive"
    return state, {"graphs": len(data), "objective": objective, "losses": losses, "seconds": time.monotonic() - t0}


def _step_loss(
    net: Any, b: Any, ids: torch.Tensor, mask: torch.Tensor, causal: bool, temperature: float
) -> torch.Tensor:
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        pooled = net.gin.pool(b.x, b.edge_index, b.batch, b.num_graphs)
    g = net.proj(pooled)
    n = g.shape[0]
    if causal:
        lengths = mask.sum(dim=1)
        seq, attn, at = net.sequence(g, ids, lengths)
        logits = net.lm(inputs_embeds=seq, attention_mask=attn).logits
        start = int(at[0] - lengths[0])  # where the summary begins (the same for every row)
        pred = logits[:, start - 1 : start - 1 + ids.shape[1]]
        target = ids.masked_fill(mask == 0, -100)
        return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1), ignore_index=-100)
    seq, attn, at = net.sequence(g, ids[:, :0], torch.zeros(n, dtype=torch.long))
    graph_vec = net.hidden(seq, attn)[torch.arange(n), at]
    text_h = net.lm(input_ids=ids, attention_mask=mask).last_hidden_state
    text_vec = (text_h * mask.unsqueeze(-1)).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp(min=1)
    sim = F.normalize(graph_vec, dim=-1) @ F.normalize(text_vec, dim=-1).T / temperature
    labels = torch.arange(n)
    return 0.5 * (F.cross_entropy(sim, labels) + F.cross_entropy(sim.T, labels))
