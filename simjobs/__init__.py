"""A simulated GPU workload (`gpupack simgpu run`) for tests and the demo."""
