"""Oracles imported by tests only: the unit-level cycle-by-cycle simulator (:mod:`.unit_level`) and
the numpy SnapStream (:mod:`.snapstream`). Nothing in the package imports this folder."""
