"""Sweeps: an experiment's ``sweep:`` section (:mod:`.axes`) loaded and expanded into sweep points
(:mod:`.load`), planned into runs that carry their loaded specs (:mod:`.plan`), checked without
running for ``check`` (:mod:`.check`), and run on an executor (:mod:`.executors`: this process, a
process pool or a Dask cluster) by one loop that keeps each finished run on disk for ``--resume``
(:mod:`.run`, :mod:`.store`)."""
