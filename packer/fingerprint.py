"""A job's fingerprint: who runs it, what it is called, and what its batch script says.

Two submissions with the same fingerprint are taken to be runs of the same workload, so
the history of one estimates the other. Pure and deterministic; bytes in, hex out.
"""
from __future__ import annotations

import hashlib

FINGERPRINT_HEX_CHARS = 16


def fingerprint(user: str, name: str, script: bytes | str) -> str:
    """Hash of user, job name and batch script (exact bytes; any encoding)."""
    if isinstance(script, str):
        script = script.encode("utf-8", "surrogateescape")
    digest = hashlib.sha256()
    for part in (user.encode("utf-8", "surrogateescape"), name.encode("utf-8", "surrogateescape")):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    digest.update(script)
    return digest.hexdigest()[:FINGERPRINT_HEX_CHARS]
