"""The dev cluster's error: what went wrong and what to do."""
from __future__ import annotations

__all__ = ["DevClusterError"]


class DevClusterError(RuntimeError):
    """The dev cluster cannot be brought up; the message says what to do."""
