"""Report: simulated points -> records, metrics and files; it never re-runs the simulation
(docs/architecture.md).

- :mod:`.fields` -- every results field declared once (types in :mod:`.registry`, table rows in
  :mod:`.table_rows`); :mod:`.records` builds a record from a point's result, with
  :mod:`.metrics`, :mod:`.slo`, :mod:`.prefix_fields` and :mod:`.multi_model_fields`.
- :mod:`.results` -- ``results.json`` / ``results.csv``; :mod:`.outputs` -- whole files or none and a
  status per run; :mod:`.results_doc` -- ``docs/results.md`` rendered from the declaration.
- :mod:`.table` -- the printed side-by-side table; :mod:`.plot`, :mod:`.plot_csv` (with
  :mod:`.csv_table`), :mod:`.pareto` -- plots on :mod:`.figure`'s canvas; :mod:`.chrome_trace` --
  Perfetto traces; :mod:`.describe` -- ``describe`` of model files.
"""
