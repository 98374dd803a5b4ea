"""Hardware: ``hw_configs/*.yaml`` -> a validated, immutable spec -> the figures and graphs derived
from it (docs/architecture.md). It knows nothing of models.

- :mod:`.spec` -- the schema (:class:`~sn40l_sim.hardware.spec.NodeSpec`,
  :class:`~sn40l_sim.hardware.spec.SocketSpec`; memory tiers as data); :mod:`.loader` -- files to
  specs, ``base:`` overlays and overrides, stated figures checked; :mod:`.legacy` -- old-style
  socket files converted on load.
- :mod:`.grid` -- a tile's checkerboard of PCUs and PMUs checked against its unit counts;
  :mod:`.node_checks` -- a node's topology checked against its sockets' P2P ports.
- :mod:`.figures` -- derived totals (peak FLOP/s, SRAM, bandwidths), computed, never stored;
  :mod:`.topology` -- the node as a networkx graph (sockets, tiles, meshes, links).
- :mod:`.units` -- the tile-level cycle costs of PCUs, PMUs, off-chip memory and networks.
"""
