"""Everything that speaks Slurm: the submit shim, the adapter, the daemons, the CLI, the dev cluster.

Also the Prometheus
metrics (`metrics/`), the web view (`web/`) and the benchmarks (`bench/`); docs/architecture.md
maps every package.
"""
