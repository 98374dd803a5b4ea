"""Serving: one simulation point end to end (:mod:`.point`), step costs (:mod:`.step_costs`), the
continuous-batching loop (:mod:`.loop`), compiled batch sizes (:mod:`.batching`) and workloads
(:mod:`.workload`)."""
