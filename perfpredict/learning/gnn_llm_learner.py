"""Fitting ``gnn_llm``: stage 1 (GraphMAE pretraining of the GIN), stage 2 (graph-text alignment), then stage 3,
the supervised members of the ensemble loop. What it fits is :class:`~perfpredict.predictors.gnn_llm.GNNLLMModel`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from perfpredict.learning.gnn_ensemble_fit import GNNEnsembleLearner
from perfpredict.predictors.gnn_data import NODE_FEATURES
from perfpredict.predictors.gnn_llm import GNNLLMModel, gnn_llm_net

if TYPE_CHECKING:
    from torch import nn


class GNNLLMLearner(GNNEnsembleLearner, GNNLLMModel):
    """GNN + LLM with LoRA; keyword arguments override DEFAULTS (``stage1=False`` etc. for ablations,
    ``base_lm=PATH`` for another local LM)."""

    def param_groups(self, net: nn.Module) -> list[dict[str, Any]]:
        lora = [p for n, p in net.named_parameters() if p.requires_grad and "lora_" in n]
        rest = [p for n, p in net.named_parameters() if p.requires_grad and "lora_" not in n]
        return [{"params": rest, "lr": self.hp["lr"]}, {"params": lora, "lr": self.hp["lm_lr"]}]

    def pretrain(self, keys: list[tuple[Any, float, str]], seed: int) -> None:
        t0 = time.monotonic()
        kind = keys[0][2] if keys else "gpu"
        self.gin_state = None
        self.stage2_state = None
        if self.hp["stage1"]:
            from perfpredict.learning.gnn_llm_stages import stage1_encoder

            self.gin_state, self.node_std, info = stage1_encoder(self.hp, kind, seed, keys)
            self.stage_info["stage1"] = info
        t1 = time.monotonic()
        if self.hp["stage2"]:
            from perfpredict.learning.gnn_llm_stages import stage2_align

            self.stage2_state, info = stage2_align(
                self._stage2_net(seed), self.base(), self.hp, self.node_std, keys, seed
            )
            self.stage_info["stage2"] = info
        self.stage_info["seconds"] = {"stage1": t1 - t0, "stage2": time.monotonic() - t1}

    def _stage2_net(self, seed: int) -> Any:
        """The network stage 2 aligns: stage 1's GIN on the base LM, seeded as stage 2 always was."""
        import torch

        assert self.node_std is not None
        torch.manual_seed(seed * 1000 + 29)
        net = gnn_llm_net(self.base(), len(NODE_FEATURES), 1, self.hp)
        if self.gin_state is not None:
            net.gin.load_state_dict(self.gin_state)
        return net

    def fit(self, train: Any, targets: Any, seed: int = 0) -> GNNLLMLearner:
        super().fit(train, targets, seed)
        self.fit_info["stages"] = self.stage_info
        return self
