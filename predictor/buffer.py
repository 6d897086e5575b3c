"""A growable float64 array: the forecaster's sample and forecast histories."""
from __future__ import annotations

import numpy as np

__all__ = ["Buffer"]


class Buffer:
    """A growable float64 array (amortised O(1) append, zero-copy view)."""

    def __init__(self, capacity: int = 256):
        self._data = np.empty(capacity, dtype=np.float64)
        self.n = 0

    def append(self, value: float) -> None:
        if self.n == self._data.shape[0]:
            grown = np.empty(self._data.shape[0] * 2, dtype=np.float64)
            grown[: self.n] = self._data[: self.n]
            self._data = grown
        self._data[self.n] = value
        self.n += 1

    def view(self) -> np.ndarray:
        return self._data[: self.n]
