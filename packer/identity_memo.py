"""The identities of scripts seen lately, kept so that a resubmitted script is not read again.

The submit path works out a job's fingerprint (``packer.fingerprint``) and, for a job with no
measured run of its own, its looser levels' keys (``packer.workload_identity``) while
slurmctld holds its job write lock. Both read the whole script; the same script comes again and
again (a sweep's array of jobs, a job resubmitted after an edit elsewhere). This memo keeps them
per (user, name, script digest): a digest of the script's bytes (BLAKE2b, 128 bits) stands in for
the script, so the memo holds no script however large, and at most ``size`` entries (the least
recently used go first): a user submitting ever new scripts costs it ``size`` entries, no more.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from packer.fingerprint import fingerprint
from packer.workload_identity import WorkloadKeys, workload_keys

DEFAULT_SIZE = 4096


@dataclass
class Identity:
    """One submission's fingerprint, and its levels' keys once asked for (``keys``)."""

    user: str
    name: str
    fingerprint: str
    _keys: WorkloadKeys | None = None  # worked out on first use (only jobs without history need them)

    def keys(self, script: bytes) -> WorkloadKeys:
        """``workload_keys`` of the script this identity was made for."""
        if self._keys is None:
            self._keys = workload_keys(self.user, self.name, script)
        return self._keys


class IdentityMemo:
    """The :class:`Identity` of a submission (the same answers as ``fingerprint`` and
    ``workload_keys``), kept for the ``size`` most recently seen."""

    def __init__(self, size: int = DEFAULT_SIZE):
        if size < 1:
            raise ValueError(f"an identity memo holds at least one entry, not {size}")
        self.size = size
        self._held: OrderedDict[tuple[str, str, bytes], Identity] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._held)

    def of(self, user: str, name: str, script: bytes) -> Identity:
        key = (user, name, hashlib.blake2b(script, digest_size=16).digest())
        held = self._held.get(key)
        if held is not None:
            self._held.move_to_end(key)
            self.hits += 1
            return held
        self.misses += 1
        held = self._held[key] = Identity(user, name, fingerprint(user, name, script))
        if len(self._held) > self.size:
            self._held.popitem(last=False)
        return held
