"""Shared fixtures for the models tests: the shipped model files, loaded once."""
from __future__ import annotations

import pytest

from sn40l_sim.models.loader import load_model
from sn40l_sim.models.template import GRAPHS_DIR


@pytest.fixture(scope="session")
def r1():
    return load_model(GRAPHS_DIR / "deepseek_r1.yaml")


@pytest.fixture(scope="session")
def llama8b():
    return load_model(GRAPHS_DIR / "llama3_1_8b.yaml")


@pytest.fixture(scope="session")
def llama70b():
    return load_model(GRAPHS_DIR / "llama3_1_70b.yaml")
