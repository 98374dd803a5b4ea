"""Oracles imported by tests only: the unit-level cycle-by-cycle simulator (:mod:`.unit_level`) and
the numpy references of the KV policies' selection rules and the KV formats (:mod:`.snapstream`,
:mod:`.h2o`, :mod:`.arkvale`, :mod:`.kv_quant`; docs/architecture.md, "Two fidelities"). Nothing in
the package imports this folder."""
