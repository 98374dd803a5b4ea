"""The socket the unit-model tests run on: the project's SN40L description."""
from __future__ import annotations

from functools import cache
from pathlib import Path

from sn40l_sim.hardware.loader import load_hardware
from sn40l_sim.hardware.spec import SocketSpec

ROOT = Path(__file__).resolve().parents[3]
SN40L_YAML = ROOT / "hw_configs" / "sn40l.yaml"


@cache
def reference_socket() -> SocketSpec:
    """The SN40L socket of ``hw_configs/sn40l.yaml``."""
    return load_hardware(SN40L_YAML).socket
