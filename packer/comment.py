"""The one-line decision record written into a job's AdminComment.

Readable by a person and by a parser::

    gpupack: packed shard:2 est=7.6GiB util=35% src=history(5) fp=1a2b3c4d5e6f7a8b
    gpupack: exclusive reason=no-history fp=1a2b3c4d5e6f7a8b
    gpupack: untouched reason=multi-gpu
    gpupack: advise packed shard:2 est=7.6GiB src=history(5) fp=...   (advise mode: not applied)

A comment the site already set is kept: ours is appended after `` | ``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from packer.gres import GresParseError, gres_text, parse_item

PREFIX = "gpupack:"
SEPARATOR = " | "
VERDICTS = ("packed", "exclusive", "untouched")

_RECORD_RE = re.compile(r"gpupack:\s*(?P<body>[^|]*)")


@dataclass(frozen=True)
class CommentRecord:
    """What a `gpupack:` AdminComment record says."""

    verdict: str  # packed | exclusive | untouched
    advised: bool = False  # advise mode: the verdict was not applied
    shards: int | None = None
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def reason(self) -> str | None:
        return self.fields.get("reason")

    @property
    def fingerprint(self) -> str | None:
        return self.fields.get("fp")

    @property
    def applied_verdict(self) -> str:
        """What actually happened to the job's request."""
        return "untouched" if self.advised else self.verdict


def render(
    verdict: str,
    *,
    shards: int | None = None,
    advised: bool = False,
    **fields: str | None,
) -> str:
    """Build the record line; `fields` with None values are left out."""
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}; expected one of {VERDICTS}")
    parts = [PREFIX]
    if advised:
        parts.append("advise")
    parts.append(verdict)
    if shards is not None:
        parts.append(gres_text("shard", shards))
    for key, value in fields.items():
        if value is None:
            continue
        text = str(value)
        if not text or any(c in text for c in " \t\n|="):
            raise ValueError(f"comment field {key}={text!r} must be one non-empty token")
        parts.append(f"{key}={text}")
    return " ".join(parts)


def parse(admin_comment: str | None) -> CommentRecord | None:
    """Find and parse our record inside an AdminComment; None when there is none."""
    if not admin_comment:
        return None
    match = _RECORD_RE.search(admin_comment)
    if not match:
        return None
    tokens = match.group("body").split()
    advised = False
    if tokens and tokens[0] == "advise":
        advised = True
        tokens = tokens[1:]
    if not tokens or tokens[0] not in VERDICTS:
        return None
    verdict, shards, fields = tokens[0], None, {}
    for token in tokens[1:]:
        shard = _shard_count(token)
        if shard is not None:
            shards = shard
        elif "=" in token:
            key, _, value = token.partition("=")
            fields[key] = value
    return CommentRecord(verdict=verdict, advised=advised, shards=shards, fields=fields)


def _shard_count(token: str) -> int | None:
    """The count of an untyped `shard:K` token (the record's size), read as any GRES item."""
    if not token.startswith("shard:"):
        return None
    try:
        item = parse_item(token)
    except GresParseError:
        return None
    return item.count if item.type is None else None


def merge(site_comment: str | None, record: str) -> str:
    """Keep a comment the site set; replace an earlier record of ours (a requeued job)."""
    site = (site_comment or "").strip()
    if PREFIX in site:
        site = site[: site.index(PREFIX)].rstrip(" |")
    return f"{site}{SEPARATOR}{record}" if site else record


def with_field(admin_comment: str | None, key: str, value: str | None) -> str | None:
    """The AdminComment with one field of our record set (or removed with None); the
    site's part and every other field are kept. None when there is no record of ours."""
    record = parse(admin_comment)
    if record is None:
        return None
    fields = {k: v for k, v in record.fields.items() if k != key}
    if value:
        fields[key] = value
    line = render(record.verdict, shards=record.shards, advised=record.advised, **fields)
    return merge(admin_comment, line)
