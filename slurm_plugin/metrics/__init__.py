"""The suite's Prometheus metrics, built with prometheus_client.

One scrape endpoint per daemon, each with its own registry and families:

- the helper's submit side (:mod:`slurm_plugin.metrics.submit`): decisions by verdict and
  reason, the decision's latency, the cluster view's age, the mode;
- the helper's watcher (:mod:`slurm_plugin.metrics.watcher`): requeues, restarts, MIG layout
  changes and the run-time actions (shadow or enforced), counted from the event log in
  SQLite so they survive a restart and agree with `gpupack events`;
- each node agent (:mod:`slurm_plugin.metrics.agent`): per GPU shares and MIG slices in use,
  MIG reconfigurations.

Addresses default to 127.0.0.1 and a port derived from the cluster's own Slurm ports
(:mod:`slurm_plugin.metrics.ports`); docs/operations.md describes every family.
"""
