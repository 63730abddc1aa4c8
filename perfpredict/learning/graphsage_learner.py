"""Fitting ``graphsage``: the ensemble loop of ``gnn_ensemble_fit`` on the DIPPM-style GraphSAGE network."""

from __future__ import annotations

from perfpredict.learning.gnn_ensemble_fit import GNNEnsembleLearner
from perfpredict.predictors.graphsage import GraphSAGEModel


class GraphSAGELearner(GNNEnsembleLearner, GraphSAGEModel):
    """DIPPM-style GraphSAGE; ``GraphSAGELearner(members=5, ...)`` overrides DEFAULTS."""
