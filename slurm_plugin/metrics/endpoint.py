"""Serve one registry at http://HOST:PORT/metrics (prometheus_client's own server)."""
from __future__ import annotations

import logging
import threading

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

from slurm_plugin.metrics.ports import Address

log = logging.getLogger(__name__)


class MetricsEndpointError(RuntimeError):
    """The endpoint cannot listen; the message names the address and what to change."""


def new_registry() -> CollectorRegistry:
    """A registry of its own for one daemon, with the standard process_* families."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    return registry


class MetricsEndpoint:
    """A running endpoint; `stop()` closes it."""

    def __init__(self, address: Address, registry: CollectorRegistry):
        try:
            self._server, self._thread = start_http_server(address.port, address.host, registry)
        except OSError as exc:
            raise MetricsEndpointError(
                f"cannot serve metrics on {address.host}:{address.port}: {exc} (another daemon on this "
                "port? set the port in gpupack.toml [metrics] or with --metrics-port, 0 for none)"
            ) from exc
        self.address = Address(address.host, self._server.server_address[1])
        log.info("metrics on %s", self.address.url)

    @property
    def url(self) -> str:
        return self.address.url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if isinstance(self._thread, threading.Thread):
            self._thread.join(timeout=5)


def serve(address: Address, registry: CollectorRegistry, what: str) -> MetricsEndpoint | None:
    """Start the endpoint, or log why not (a daemon runs on without its metrics)."""
    if not address.enabled:
        log.info("%s: no metrics endpoint (port 0)", what)
        return None
    try:
        return MetricsEndpoint(address, registry)
    except MetricsEndpointError as exc:
        log.error("%s: %s", what, exc)
        return None
