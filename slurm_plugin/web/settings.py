"""The `[web]` table of gpupack.toml: where the view listens and who may see it."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from packer.config import ConfigError
from packer.settings_schema import check_fields, setting
from slurm_plugin.config.toml_file import read_table

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

LOCALHOST_NETWORKS = ("127.0.0.0/8", "::1/128")


@dataclass(frozen=True)
class WebSettings:
    bind: str = "127.0.0.1"  # the address the view listens on; 0.0.0.0 for every interface
    port: int = setting(0, ge=0, le=65535)  # 0: no web view (the dev cluster sets its own port + 80)
    allow: tuple[str, ...] = LOCALHOST_NETWORKS  # client networks that may see it
    refresh_s: float = setting(2.0, gt=0)  # how old the data behind a page may be (and how often pages poll)
    max_rows: int = setting(500, ge=1)  # pending/running rows listed on the main page (the counts cover all)
    events: int = setting(20, ge=0)  # latest events on the main page
    base_path: str = "/"  # the path a site's proxy serves the view under, e.g. "/gpupack/"

    def __post_init__(self) -> None:
        check_fields(self, "web")
        if not self.base_path.startswith("/"):
            raise ConfigError(f"[web] base_path={self.base_path!r} must start with / (e.g. /gpupack/)")
        networks(self.allow)  # fail at load time, naming the bad entry

    @property
    def networks(self) -> tuple[Network, ...]:
        return networks(self.allow)


def networks(allow: tuple[str, ...] | list[str]) -> tuple[Network, ...]:
    out = []
    for entry in allow:
        try:
            out.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError as exc:
            raise ConfigError(f"[web] allow: {entry!r} is not a network (e.g. 10.0.0.0/8 or ::1/128): {exc}") from exc
    return tuple(out)


def client_allowed(address: str, allowed: tuple[Network, ...]) -> bool:
    """Whether a client address is inside one of the allowed networks (IPv4-mapped IPv6 too)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    candidates = (ip, mapped) if mapped is not None else (ip,)
    return any(c.version == n.version and c in n for c in candidates for n in allowed)


def load_web_settings(path: Path | None, **overrides: object) -> WebSettings:
    """`[web]` of the file (missing file or table: the defaults), then the CLI's overrides."""
    table = read_table(path, "web", WebSettings)
    table.update({k: v for k, v in overrides.items() if v is not None})
    if "allow" in table:
        allow = table["allow"]
        table["allow"] = tuple([allow] if isinstance(allow, str) else allow)
    return WebSettings(**table)
