"""The router in front of a serving plan's instances on several node groups: nginx as an
HTTP load balancer, its `upstream` with `least_conn` and a `weight=` per server.

nginx `ngx_http_upstream_module` (nginx.org/en/docs/http/ngx_http_upstream_module.html):
`least_conn` passes a request to the server with the fewest active connections relative to
its weight, `weight=N` (a positive integer, 1 by default) is that weight, and `zone` keeps the
counts in memory shared by the worker processes (without it each worker balances alone).
Active connections per unit of weight is the router the mix simulator prices
(`solver.serving.simulate.simulate_colocated_mix`: outstanding work per unit of instance
speed), counted in requests rather than tokens; the weights are the instances' speeds
(`solver.serving.simulate.instance_speed`) scaled to integers (`weights`).

The configuration uses no nginx variables, so a launcher may write it through an expanding
shell here-document (replica addresses known only at run time).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

ROUTER_PORT = 8080
"""Where the router listens."""
ROUTER_IMAGE = "nginx:stable"
"""The official nginx image (reads /etc/nginx/nginx.conf)."""
WEIGHT_SCALE = 1000
"""The fastest instance's weight: integer weights then keep every other speed ratio to
within 0.5 / 1000 of the fastest's (rounding)."""
ROUTER_DIR = "meshplan-router"
"""The nginx prefix (configuration, temporary files) of a router started from a script."""


@dataclass(frozen=True)
class Backend:
    """One server of the upstream: an engine replica (or a Service in front of identical
    ones) at `address` (host:port) with its integer `weight`; `label` says which."""

    address: str
    weight: int
    label: str


def weights(speeds: Sequence[float]) -> list[int]:
    """Integer nginx weights proportional to `speeds`: the fastest gets `WEIGHT_SCALE`,
    the others their speed ratio times it, rounded (at least 1)."""
    top = max(speeds)
    return [max(1, round(WEIGHT_SCALE * s / top)) for s in speeds]


def nginx_conf(backends: Sequence[Backend], port: int = ROUTER_PORT) -> str:
    """The nginx configuration of the router: every backend in one `least_conn` upstream
    with its weight; streamed answers pass through unbuffered, request bodies of any size
    (long prompts) are accepted, and a request may take an hour."""
    servers = "\n".join(
        f"        server {b.address} weight={b.weight};  # {b.label}" for b in backends
    )
    return (
        "# meshplan router: least connections per unit of weight (weights = engine speeds)\n"
        "worker_processes auto;\n"
        "error_log stderr;\n"
        "events {\n"
        "    worker_connections 4096;\n"
        "}\n"
        "http {\n"
        "    access_log off;\n"
        "    upstream meshplan_engines {\n"
        "        zone meshplan_engines 64k;\n"
        "        least_conn;\n"
        f"{servers}\n"
        "    }\n"
        "    server {\n"
        f"        listen {port};\n"
        "        client_max_body_size 0;\n"
        "        location / {\n"
        "            proxy_pass http://meshplan_engines;\n"
        "            proxy_http_version 1.1;\n"
        '            proxy_set_header Connection "";\n'
        "            proxy_buffering off;\n"
        "            proxy_read_timeout 3600s;\n"
        "        }\n"
        "    }\n"
        "}\n"
    )


def nginx_shell(prefix: str = f"$PWD/{ROUTER_DIR}/") -> str:
    """The shell command that starts nginx in the foreground with its files under `prefix`
    (`nginx.conf` there, its pid file and temporary directories too: no root needed)."""
    return f'nginx -p "{prefix}" -c nginx.conf -g ' + shlex.quote("daemon off; pid nginx.pid;")
