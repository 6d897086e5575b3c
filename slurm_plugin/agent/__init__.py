"""The node agent: isolates each job step on the GPU Slurm gave it, samples jobs, survives restarts.

- :mod:`.isolation` pure decisions (what a step's env says it got, which MIG profile, MPS share)
- :mod:`.state` the persistent assignments (JSON, atomic rename)
- :mod:`.trust` who may ask what; the bounds on a job's own progress reports
- :mod:`.daemon` the agent itself: the coordinator of the socket protocol (thin adapters to the
  GPU backend and Slurm), with :mod:`.isolator` (whole GPU, MIG slice, MPS share),
  :mod:`.mig_manager` (MIG instances, layouts), :mod:`.sampler` and :mod:`.counters` (samples),
  :mod:`.reconcile` (agreement with the GPU and Slurm), :mod:`.slurm_jobs` (the jobs Slurm
  runs on the node), :mod:`.finals` (job summaries) and :mod:`.paths` (its files)
- :mod:`.server` the local Unix socket (JSON lines; SO_PEERCRED)
- :mod:`.client` what the SPANK plugin, the workload, the epilog and the helper call
"""
