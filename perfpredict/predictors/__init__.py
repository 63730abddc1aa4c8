"""Predictors: each maps an OpGraph, a Device and a RunConfig to predictions. See registry.py."""
