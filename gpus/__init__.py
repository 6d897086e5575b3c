"""The GPU backends behind `mig.backend.GpuBackend`: NVML on real GPUs (`gpus.nvml`) and
the simulated GPU with its file-backed state and its libnvidia-ml (`gpus.sim`)."""
