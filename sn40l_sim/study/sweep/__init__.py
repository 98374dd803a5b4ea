"""Sweeps: an experiment's ``sweep:`` section expanded into points (:mod:`.axes`, :mod:`.load`) and
run in parallel processes (:mod:`.run`)."""
