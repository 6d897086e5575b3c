"""The fake ``libnvidia-ml.so.1`` behind the real ``pynvml``, in parts (entry point:
``tests/unit/mig/fake_libnvml.py``, which re-exports what tests use).

- :mod:`.nvml_h`: return codes, constants and struct layouts repeated from ``nvml.h``;
- :mod:`.model`: the model of MIG-capable GPUs (devices, MIG mode, GPU and compute
  instances, MIG devices, processes) and what in it is a plausible choice;
- :mod:`.exports`: the ctypes side of one exported C function and the library object;
- :mod:`.calls`: what every call shares (dispatch, handle and buffer checks);
- :mod:`.privileges`: the MIG user guide's privilege rules;
- :mod:`.devices`, :mod:`.gpu_instances`, :mod:`.compute_instances`, :mod:`.mig_devices`,
  :mod:`.processes`, :mod:`.utilization`: the C functions, by area;
- :mod:`.library`: :class:`FakeNvml`, the export table and the test helpers.
"""
