"""The NVML backend: MIG on real GPUs through ``pynvml`` (the only code that talks to NVML)."""
