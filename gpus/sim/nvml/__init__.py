"""The simulated GPU's ``libnvidia-ml.so.1``: a fake NVML library behind the real ``pynvml``,
in parts. :class:`FakeNvml` keeps its GPUs in memory (unit tests; ``tests/unit/gpus/
fake_libnvml.py`` re-exports what they use); :class:`SimulatedNvml` (:mod:`.shared`) keeps
them in the simulated GPU's shared state, for the node agent's ``--nvml-library simulated:DIR``.

- :mod:`.nvml_h`: return codes, constants and struct layouts repeated from ``nvml.h``;
- :mod:`.model`: the model of MIG-capable GPUs (devices, MIG mode, GPU and compute
  instances, MIG devices, processes) and what in it is a plausible choice;
- :mod:`.exports`: the ctypes side of one exported C function and the library object;
- :mod:`.calls`: what every call shares (dispatch, handle and buffer checks);
- :mod:`.privileges`: the MIG user guide's privilege rules;
- :mod:`.devices`, :mod:`.gpu_instances`, :mod:`.compute_instances`, :mod:`.mig_devices`,
  :mod:`.processes`, :mod:`.utilization`: the C functions, by area;
- :mod:`.library`: :class:`FakeNvml`, the export table and the test helpers;
- :mod:`.shared`: :class:`SimulatedNvml`, the model backed by the simulated GPU's state file.
"""
from .library import FakeNvml
from .shared import SimulatedNvml, install

__all__ = ["FakeNvml", "SimulatedNvml", "install"]
