"""Answering never reaches training code: the layers contract (pyproject's [tool.importlinter], run by ``make test``)
keeps predictors/ below learning/ and the API, string-loaded registry modules included. What it cannot see: that
every learner the CLI names by string exists."""

import importlib

from perfpredict.learning.train import LEARNERS


def test_every_trainable_learner_module_exists():
    for module, cls in LEARNERS.values():
        assert hasattr(importlib.import_module(module), cls)
