"""The SimPy engine, a pure simulator: a placed kernel graph on a node -> its timing, in integer RDU
cycles. It parses no YAML and builds no model; its one contract is
``run_graph(NodeSpec, PlacedGraph) -> GraphRun``, summarised by :func:`.phase.phase_timing`.

- :mod:`.run_graph` -- one placed graph on the busiest socket; :mod:`.kernel_process` -- a kernel as
  a process streaming chunks of tiles; :mod:`.resources` -- a socket's tiles, memory tiers, TLN, P2P
  ports; :mod:`.fluid` -- shared bandwidth (max-min fair flows).
- :mod:`.collectives` and :mod:`.links` -- ring, tree and direct collectives on the node's directed links.
- :mod:`.phase` -- :class:`~sn40l_sim.engine.phase.PhaseTiming`; :mod:`.breakdown` -- where a
  step's time goes; :mod:`.trace` -- the intervals a Chrome trace is drawn from.

Steps are built, mapped and memoised by :mod:`sn40l_sim.serving.step_costs`; the cycle-by-cycle
oracle of one kernel is :mod:`sn40l_sim.reference.unit_level`.
"""
