"""A simulated GPU that someone lays out by hand between a plan and its first create."""
from __future__ import annotations


class RacingGpu:
    """Before the first create, someone makes a 1g.10gb at the same start (nvidia-smi by hand),
    so the simulated GPU refuses the create as overlapping, as the driver would."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.raced = False

    def __getattr__(self, name):
        return getattr(self.gpu, name)

    def create_instance(self, gpu_index, profile, start, owner=None):
        if not self.raced:
            self.raced = True
            self.gpu.create_instance(gpu_index, "1g.10gb", start, owner="hand")
        return self.gpu.create_instance(gpu_index, profile, start, owner)
