"""``bnc-sweep``: train thousands of configurations at once, resumably (issue 12).

The stage runs grid -> chunks -> batched trainer -> results table:

* :mod:`bnc_deploy.sweep.grid` says *what* to run: a :class:`~bnc_deploy.sweep.grid.GridSpec`
  (product axes, jointly varying draws, fixed values; from flags, a TOML/JSON file or a paper
  preset of :mod:`bnc_deploy.sweep.paper`) expands to flat configuration records
  (:mod:`bnc_deploy.sweep.records`: keys, defaults, values), each named by a content hash
  (:func:`~bnc_deploy.sweep.records.config_id`) over the complete configuration.
* The runner cuts the records not yet in the table into chunks that one batched trainer call
  trains side by side.
* :mod:`bnc_deploy.sweep.table` records *what came out*: one SQLite table per sweep directory,
  written one transaction per batch of rows, so an interrupted sweep (even ``kill -9``) keeps
  every finished configuration and resumes with the rest.

The records, grid and table modules use the standard library and numpy only (no torch).
"""
