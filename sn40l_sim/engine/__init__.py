"""The SimPy engine: placed kernel graphs run in integer RDU cycles, and the serving model on top.

Step timing (tile level):

- :mod:`.timing` -- :class:`~sn40l_sim.serving.step_costs.StepTimer`: build, map and simulate a prefill
  or a decode step, memoised per (phase, batch, length).
- :mod:`.run_graph` -- one placed graph on the busiest socket; :mod:`.kernels` -- a kernel as a
  process streaming chunks of tiles; :mod:`.resources` -- a socket's tiles, memory tiers, TLN, P2P
  ports; :mod:`.fluid` -- shared bandwidth (max-min fair flows).
- :mod:`.collectives` and :mod:`.links` -- ring and direct collectives on the node's directed links.
- :mod:`.phase` -- :class:`~sn40l_sim.engine.phase.PhaseTiming`; :mod:`.breakdown` -- where a
  step's time goes; :mod:`.trace` -- events and Chrome traces.

Serving (requests, continuous batching): :mod:`.serving`, :mod:`.serving_point`, :mod:`.workload`,
:mod:`.batching`. Cycle-by-cycle validation of one kernel: :mod:`.unit_level`.
"""
