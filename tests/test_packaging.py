"""pyproject.toml reads without setuptools deprecation warnings (the license is an SPDX string, PEP 639)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_license_is_an_spdx_string_and_draws_no_deprecation_warning():
    pytest.importorskip("setuptools")
    from setuptools.config import pyprojecttoml
    from setuptools.dist import Distribution

    cwd = os.getcwd()
    os.chdir(ROOT)  # the readme path is relative to the project
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dist = pyprojecttoml.apply_configuration(Distribution(), ROOT / "pyproject.toml")
    finally:
        os.chdir(cwd)
    assert dist.metadata.license_expression == "Apache-2.0"
    assert not [str(w.message) for w in caught if "license" in str(w.message).lower()]
