"""The operations port: ``/metrics`` (Prometheus text format), ``/livez``, ``/readyz``,
``/state/<store>/<key>`` (a store's committed value, ``_query``) and the console's page
and data (``eosflow._console``), when given.

A ``ThreadingHTTPServer`` in a daemon thread, not a server on the event loop: the probes
must answer while the loop is blocked (that is what ``/livez`` reports), and a scrape
must not take time from the loop. Each probe answers 200 or 503 with one line saying
why. Binds 127.0.0.1 by default; port 0 takes a free port (``MetricsServer.port``).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .._errors import ConfigError
from ._health import Health
from ._query import PREFIX, Answer, StateQueries

log = logging.getLogger("eosflow.ops")

Probe = Callable[[], tuple[bool, str]]


class MetricsServer:
    def __init__(
        self,
        host: str,
        port: int,
        health: Health | None,
        registry: Any,
        queries: StateQueries | None,
        pages: Mapping[str, Callable[[], Answer]] | None = None,
        setting: str = "metrics_port",
    ) -> None:
        """An app's port (``health``, ``queries``, a metrics ``registry`` when metrics
        are on, the console's ``pages``), or pages alone (``eosflow console``, whose
        port is its ``setting``).

        Bound to a loopback address, it answers only requests that name a loopback host
        (``Host``): a web page elsewhere cannot read it through a DNS name made to point
        at 127.0.0.1 (DNS rebinding). Bound to another address, any host is answered."""
        self._pages, self._probes = bool(pages), health is not None
        loopback = _loopback(host)
        routes: dict[str, Callable[[], Answer]] = {**(pages or {})}
        if health is not None:
            routes["/livez"] = lambda: _probe(health.live)
            routes["/readyz"] = lambda: _probe(health.ready)
        if registry is not None:
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            routes["/metrics"] = lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry))

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                route = routes.get(path)
                asked = self.headers.get("Host")  # a browser always names one
                if loopback and asked is not None and not _loopback(_hostname(asked)):
                    status, kind, body = 403, "text/plain", b"only for a loopback host\n"
                elif route is not None:
                    status, kind, body = route()
                elif queries is not None and path.startswith(PREFIX):
                    status, kind, body = queries.answer(path)
                else:
                    status, kind, body = 404, "text/plain", b"not found\n"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Content-Type-Options", "nosniff")
                if kind.startswith("text/html"):  # the console: its own files only
                    self.send_header("Content-Security-Policy", "default-src 'self'")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s %s", self.address_string(), format % args)

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise ConfigError(f"{setting}: cannot listen on {host}:{port}: {exc}") from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="eosflow-metrics", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        where = self._server.server_address[:2]
        if self._probes:
            console = " (the console at /)" if self._pages else ""
            log.info("metrics and health probes on http://%s:%d/%s", *where, console)
        else:
            log.info("the console on http://%s:%d/", *where)

    def stop(self) -> None:
        """Stop serving and close the socket (blocks up to the server's poll interval)."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


def _probe(check: Probe) -> Answer:
    ok, why = check()
    return (200 if ok else 503), "text/plain; charset=utf-8", f"{why}\n".encode()


def _hostname(host: str) -> str:
    """The host of a ``Host`` header, its port dropped (``[::1]:80`` -> ``::1``)."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
