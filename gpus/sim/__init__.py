"""The simulated GPU: MIG state, memory and counters kept in a file per node, and the
fake ``libnvidia-ml`` (`gpus.sim.nvml`) that serves it to the real ``pynvml``."""
