"""Peak-memory forecasting and the early out-of-memory warning (pure code).

Online, one sample at a time (the controller helper, the node agent, the simulator)::

    from predictor.forecast import Forecaster
    f = Forecaster(capacity_bytes, horizon, partition_sizes=sizes)   # sizes in bytes
    fc = f.update(step, bytes_)            # or update(step, requested, reuse_ratio=r)
    fc.warn, fc.warn_step, fc.predicted_peak_bytes, fc.upper_bytes, fc.next_partition

``Forecast`` (frozen dataclass): ``predicted_peak_bytes``, ``lower_bytes``/``upper_bytes``
(one-sided 99 % prediction bounds at the horizon), ``will_exceed`` (certain to exceed the
capacity), ``may_exceed`` (the upper bound does), ``confident`` (converged), ``warn``
(both), ``warn_step`` (first warning, sticky), ``crossing_step``, ``next_partition``
(smallest size holding ``upper_bytes``), ``reason``. Options: ``ForecasterOptions``.

On a whole series: ``predictor.decision.decide(series, capacity_bytes, horizon=None,
partition_sizes=None, options=None) -> Decision``; ``predictor.series.read_series(path)``;
``predictor.bench.run_bench(dir)``. Sources of series (NVML, PyTorch probe, cgroup,
procfs): ``slurm_plugin.agent.memory_sources``. Memory of LLM inference from model configs:
``predictor.kvmodel``. Closed-form OLS bounds: ``predictor.linfit``.

Inside the forecaster: ``predictor.regime`` (the window fitted: regime breaks, plateau),
``predictor.trend`` (line, bounds and point forecast on it), ``predictor.reach`` (how far
ahead certainty is claimed), ``predictor.certainty`` (convergence, the warning and its
statsmodels confirmation), ``predictor.residuals`` (lag-1 autocorrelation, curvature).

Acting on a warning: ``predictor.restart.decide_restart(...)`` restarts now or keeps the job,
priced in lost work (the helper's memory watch and the simulator, through ``packer.rules``).
"""
