"""DCGM (NVIDIA Data Center GPU Manager), read through its ``dcgmi`` program: activity per
MIG GPU instance, which NVML does not give (:mod:`gpus.dcgm.dcgmi`)."""
