"""Stage 1 of ``gnn_llm``: GraphMAE pretraining of the GIN encoder (``predictors/gin.py``).

GraphMAE (Hou et al., 2022): replace the features of 50% of the nodes with a learnable mask token, encode, re-mask
the encoded masked nodes (zeros), decode with one GIN layer back to node features, and minimise the scaled cosine
error (1 - cos)^gamma over the masked nodes. The pretrained encoder depends only on the unlabelled corpus and the
hyper-parameters, so it is cached on disk and shared by every fold and experiment.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from perfpredict.predictors.gin import gin_encoder
from perfpredict.progress import Progress, in_fits

if TYPE_CHECKING:
    import torch
    from torch import nn


def _graphmae_modules(n_in: int, hidden: int, layers: int) -> nn.ModuleDict:
    import torch
    from torch import nn
    from torch_geometric.nn import GINConv

    return nn.ModuleDict(
        {
            "encoder": gin_encoder(n_in, hidden, layers),
            "enc_to_dec": nn.Linear(hidden, hidden, bias=False),
            "decoder": GINConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_in))),
            "mask": nn.ParameterDict({"token": nn.Parameter(torch.zeros(1, n_in))}),
        }
    )


def graphmae_loss(
    mods: nn.ModuleDict, x: torch.Tensor, edge_index: torch.Tensor, mask_rate: float, gamma: float, gen: torch.Generator
) -> torch.Tensor:
    import torch
    import torch.nn.functional as F

    n = x.shape[0]
    k = max(1, int(round(mask_rate * n)))
    masked = torch.randperm(n, generator=gen)[:k]
    x_in = x.clone()
    x_in[masked] = mods["mask"]["token"].to(x.dtype)
    h = mods["enc_to_dec"](mods["encoder"](x_in, edge_index))
    h = h.clone()
    h[masked] = 0.0  # re-mask: the decoder must rebuild masked nodes from their neighbours
    rec = mods["decoder"](h, edge_index)
    cos = F.cosine_similarity(rec[masked], x[masked], dim=-1, eps=1e-8)
    return ((1.0 - cos).clamp(min=0.0) ** gamma).mean()


def corpus_key(graph_keys: Sequence[str], hp: dict[str, Any], node_schema: Any) -> str:
    payload = json.dumps({"graphs": list(graph_keys), "hp": hp, "nodes": node_schema}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def pretrain_graphmae(
    graphs: Sequence[tuple[torch.Tensor, torch.Tensor]], n_in: int, hp: dict[str, Any], seed: int
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train GraphMAE on ``graphs`` (standardised node features, edge index); returns the encoder's state."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader

    t0 = time.monotonic()
    torch.manual_seed(seed)
    mods = _graphmae_modules(n_in, hp["hidden"], hp["layers"])
    opt = torch.optim.AdamW(mods.parameters(), lr=hp["lr"], weight_decay=1e-4)
    data = [Data(x=x, edge_index=ei) for x, ei in graphs if x.shape[0] > 1]
    gen = torch.Generator().manual_seed(seed + 1)
    losses: list[float] = []
    mods.train()
    epochs = hp["epochs"] if data else 0
    for _ in Progress("GraphMAE pretraining", epochs, unit="epochs", enabled=in_fits()).track(range(epochs)):
        run, count = 0.0, 0
        for b in DataLoader(data, batch_size=hp["batch"], shuffle=True, generator=gen):
            opt.zero_grad()
            loss = graphmae_loss(mods, b.x, b.edge_index, hp["mask_rate"], hp["gamma"], gen)
            loss.backward()
            opt.step()
            run += float(loss.detach()) * b.num_graphs
            count += b.num_graphs
        losses.append(run / max(count, 1))
    state = {k: v.detach().clone() for k, v in mods["encoder"].state_dict().items()}
    return state, {"graphs": len(data), "losses": losses, "seconds": time.monotonic() - t0}


def save_state(state: dict[str, torch.Tensor], info: dict[str, Any]) -> bytes:
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in state.items()}, metadata={"info": json.dumps(info)})


def load_state(blob: bytes) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The encoder state and the training info written by :func:`save_state`."""
    from safetensors.torch import load

    header_len = int.from_bytes(blob[:8], "little")  # safetensors: 8-byte length, then a JSON header
    meta = json.loads(blob[8 : 8 + header_len]).get("__metadata__", {})
    return load(blob), json.loads(meta.get("info", "{}"))
