"""Load benchmark: latency and errors of the service under concurrent clients (issue 13).

Starts the service itself (`uvicorn app.main:app` on 127.0.0.1, a free port, a temporary
SQLite file, the process executor: the `make serve` set-up) unless `--url` names a running
one, which must be on loopback. For every number of concurrent clients (default 1, 16, 64,
256) it runs one phase per operation — liveness `GET /v1/health`, `POST /v1/estimate` of a
small plan, `GET /v1/searches/{id}/plans`, `POST /v1/searches` of a small problem with
`dedupe=false` — and one `mixed` phase whose clients take the four operations in turn, so
that health is measured while the others load the database and the CPU. Each client count
starts on an idle service: the bench first waits for the searches the previous count queued
to finish (otherwise a row would measure the order of the phases). Each client sends
`--requests` requests one after the other (aiohttp, one connection per client). An
error is a transport failure, a timeout or any status other than the expected one.

The clients are aiohttp sessions (one connection each): on the same 2 cores as the service,
the load generator's own CPU is part of every latency. httpx spent about 5.4 ms of CPU per
request at 64 clients, aiohttp 0.4 ms (a liveness probe costs the service 0.55 ms), so with
httpx the bench measured itself. Each row gives both processes' CPU per request and the
machine's load average, so a run on a busy machine can be told apart.

Targets (issue 13, on 2 cores): 0 errors; at 64 clients p99 <= 50 ms for health and
<= 1 s for estimate. Bounded: at most `clients x requests` requests per phase, each with a
`--timeout`; the service it started is stopped at the end.

Each row also gives the CPU the API process spent per request over its phase (when the
bench started the service): on a machine shared with other work the latencies measure the
contention too, the CPU cost does not.

Usage: `python bench/load.py [--clients 1,16,64,256] [--requests 5] [--search-requests 1]
[--url http://127.0.0.1:8000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[1]

SMALL_MODEL: dict[str, Any] = {
    "name": "load-tiny",
    "num_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_kv_heads": 4,
    "ffn_hidden_size": 1024,
    "vocab_size": 1000,
}
SMALL_CLUSTER = {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4}]}
SMALL_WORKLOAD = {
    "kind": "training",
    "global_batch_size": 8,
    "sequence_length": 512,
    "precision": "bf16",
}
SEARCH_BODY = {
    "model": SMALL_MODEL,
    "cluster": SMALL_CLUSTER,
    "workload": SMALL_WORKLOAD,
    "top_k": 5,
}
ESTIMATE_BODY = {
    "model": {"preset": "llama3-70b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8}]},
    "workload": {"kind": "training", "global_batch_size": 1024, "sequence_length": 4096},
    "plan": {
        "parallelism": {"data": 2, "tensor": 8, "pipeline": 4, "sequence_parallel": True},
        "micro_batch_size": 1,
        "zero_stage": 1,
        "recompute": "selective",
    },
}
GENEROUS_LIMITS = {
    # the per-tenant and queue limits of issue 13 default to generous values; the bench
    # raises them further so that its submissions measure the service, not the policy
    "MESHPLAN_MAX_QUEUED_SEARCHES": "100000",
    "MESHPLAN_TENANT_MAX_ACTIVE_SEARCHES": "100000",
    "MESHPLAN_RATE_LIMIT_PER_S": "1000000",
    "MESHPLAN_RATE_LIMIT_BURST": "1000000",
}


@dataclass
class Phase:
    mode: str
    """`single` (all clients on this operation) or `mixed`."""
    op: str
    clients: int
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[str, int] = field(default_factory=dict)

    def record(self, elapsed: float, outcome: str, ok: bool) -> None:
        self.latencies.append(elapsed)
        self.statuses[outcome] = self.statuses.get(outcome, 0) + 1
        if not ok:
            self.errors += 1


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 100)))
    return ordered[min(rank, len(ordered)) - 1]


Request = Callable[[aiohttp.ClientSession], Awaitable[int]]
"""Sends one request on a session, reads the whole answer and returns its status."""


def _call(method: str, path: str, body: dict[str, Any] | None = None) -> Request:
    async def send(session: aiohttp.ClientSession) -> int:
        async with session.request(method, path, json=body) as response:
            await response.read()
            return response.status

    return send


def operations(search_id: str) -> dict[str, tuple[Request, int]]:
    """Operation name → (request, expected status)."""
    return {
        "health": (_call("GET", "/v1/health"), 200),
        "estimate": (_call("POST", "/v1/estimate", ESTIMATE_BODY), 200),
        "plans": (_call("GET", f"/v1/searches/{search_id}/plans?limit=10"), 200),
        "search": (_call("POST", "/v1/searches?dedupe=false", SEARCH_BODY), 202),
    }


async def run_phase(
    url: str,
    name: str,
    clients: int,
    requests: int,
    ops: list[tuple[str, Request, int]],
    timeout_s: float,
) -> dict[str, Phase]:
    """`clients` concurrent clients; client i sends `requests` requests, taking `ops` in turn
    starting at i. Returns one Phase per operation name."""
    phases = {op: Phase(name, op, clients) for op, _, _ in ops}
    start = asyncio.Event()

    async def client(index: int) -> None:
        connector = aiohttp.TCPConnector(limit=1)
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as c:
            await start.wait()
            for n in range(requests):
                op, send, expected = ops[(index + n) % len(ops)]
                began = time.perf_counter()
                try:
                    status = await send(c)
                    outcome, ok = str(status), status == expected
                    if status == 201 and expected == 202:
                        ok = True  # a search that finished at once
                except TimeoutError:
                    outcome, ok = "timeout", False
                except aiohttp.ClientError as exc:
                    outcome, ok = type(exc).__name__, False
                phases[op].record(time.perf_counter() - began, outcome, ok)

    tasks = [asyncio.create_task(client(i)) for i in range(clients)]
    await asyncio.sleep(0.05)
    start.set()
    await asyncio.gather(*tasks)
    return phases


def check_loopback(url: str) -> None:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise SystemExit(f"--url must be on loopback (127.0.0.0/8, ::1, localhost); got {host!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_service(workdir: Path, app_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "MESHPLAN_DATABASE_URL": f"sqlite:///{workdir / 'meshplan.db'}",
        "MESHPLAN_LOG_LEVEL": "WARNING",
        **GENEROUS_LIMITS,
    }
    with open(workdir / "service.log", "wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1",
             "--port", str(port), "--no-access-log", "--timeout-keep-alive", "75"],
            cwd=app_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return process, f"http://127.0.0.1:{port}"


def wait_for(url: str, path: str, timeout_s: float = 180.0) -> float:
    """Seconds until `GET path` answers 200."""
    began = time.monotonic()
    deadline = began + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}{path}", timeout=2).status_code == 200:
                return time.monotonic() - began
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{url}{path} did not answer 200 within {timeout_s} s")


def wait_ready(url: str, timeout_s: float = 180.0) -> float:
    """Seconds until `/v1/health/ready` answers 200 (`/v1/health` for a service without
    readiness)."""
    try:
        missing = httpx.get(f"{url}/v1/health/ready", timeout=2).status_code == 404
    except httpx.HTTPError:
        missing = False
    return wait_for(url, "/v1/health" if missing else "/v1/health/ready", timeout_s)


def seed_search(url: str) -> dict[str, Any]:
    """One finished search (whose plans the `plans` phases read)."""
    r = httpx.post(f"{url}/v1/searches?wait=30", json=SEARCH_BODY, timeout=60)
    r.raise_for_status()
    body: dict[str, Any] = r.json()
    return body


def queue_wait_s(search: dict[str, Any]) -> float:
    """created_at → started_at of a search, in seconds."""
    from datetime import datetime

    created = datetime.fromisoformat(search["created_at"])
    started = datetime.fromisoformat(search["started_at"])
    return (started - created).total_seconds()


HEADER = (
    f"{'mode':<7} {'op':<9} {'clients':>7} {'requests':>8} {'errors':>6} "
    f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}  statuses"
)


def format_row(row: Phase) -> str:
    lat = [x * 1000 for x in row.latencies]
    statuses = " ".join(f"{k}:{v}" for k, v in sorted(row.statuses.items()))
    return (
        f"{row.mode:<7} {row.op:<9} {row.clients:>7} {len(lat):>8} {row.errors:>6} "
        f"{percentile(lat, 50):>8.1f} {percentile(lat, 99):>8.1f} "
        f"{max(lat) if lat else float('nan'):>8.1f}  {statuses}"
    )


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of process `pid` so far (Linux /proc), None if unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drain(url: str, timeout_s: float) -> float:
    """Wait until no search is queued or running (those an earlier client count submitted),
    so that each client count starts on an idle service; returns the seconds waited."""
    began = time.monotonic()
    async with aiohttp.ClientSession(url) as session:
        while time.monotonic() - began < timeout_s:
            busy = 0
            for status in ("queued", "running"):
                async with session.get(f"/v1/searches?status={status}&limit=1") as response:
                    busy += int((await response.json()).get("total", 0))
            if busy == 0:
                break
            await asyncio.sleep(0.5)
    return time.monotonic() - began if time.monotonic() - began > 0.05 else 0.0


async def main_async(
    args: argparse.Namespace, url: str, search_id: str, pid: int | None
) -> list[Phase]:
    """Every phase, each row printed when its phase ends. Search submissions come last at
    each client count (the searches they queue keep the workers busy afterwards) and send
    `--search-requests` each."""
    ops = operations(search_id)
    rows: list[Phase] = []
    print(
        HEADER + "  (cpu ms/request over the phase: the API process, this load generator;"
        " load: the machine's 1-minute load average at the phase's end)",
        flush=True,
    )
    order = [op for op in args.ops if op != "search"] + [op for op in args.ops if op == "search"]
    for clients in args.clients:
        drained = await drain(url, args.timeout * 5)
        if drained:
            print(f"(waited {drained:.1f} s for the searches queued before to finish)", flush=True)
        plan = [("single", [(op, *ops[op])]) for op in order]
        plan.insert(len(order) - ("search" in order), ("mixed", [(op, *ops[op]) for op in order]))
        for mode, phase_ops in plan:
            searches = mode == "single" and phase_ops[0][0] == "search"
            requests = args.search_requests if searches else args.requests
            before, own_before = cpu_seconds(pid), time.process_time()
            result = await run_phase(url, mode, clients, requests, phase_ops, args.timeout)
            after, own = cpu_seconds(pid), time.process_time() - own_before
            total = sum(len(p.latencies) for p in result.values())
            cpu = (
                f"  api cpu {(after - before) * 1000 / total:.2f}"
                if before is not None and after is not None and total
                else ""
            )
            cpu += f"  client cpu {own * 1000 / max(total, 1):.2f}"
            cpu += f"  load {os.getloadavg()[0]:.1f}"
            for phase in result.values():
                print(format_row(phase) + cpu, flush=True)
                rows.append(phase)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,16,64,256",
                        type=lambda s: [int(x) for x in s.split(",")])  # fmt: skip
    parser.add_argument("--requests", type=int, default=5, help="requests per client per phase")
    parser.add_argument(
        "--search-requests", type=int, default=1, help="search submissions per client"
    )
    parser.add_argument("--ops", default="health,estimate,plans,search",
                        type=lambda s: s.split(","))  # fmt: skip
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    parser.add_argument("--url", help="a running service on loopback (else one is started)")
    parser.add_argument("--app-dir", type=Path, default=ROOT,
                        help="checkout whose app the started service runs (default: this one)")  # fmt: skip
    args = parser.parse_args()
    if not (1 <= args.requests <= 100 and 1 <= args.search_requests <= 100):
        raise SystemExit("bounded: --requests and --search-requests 1..100")
    if max(args.clients) > 1024:
        raise SystemExit("bounded: at most 1024 clients")
    process = None
    with tempfile.TemporaryDirectory(prefix="meshplan-load-") as tmp:
        if args.url:
            check_loopback(args.url)
            url = args.url.rstrip("/")
        else:
            process, url = start_service(Path(tmp), args.app_dir)
        try:
            live_s = wait_for(url, "/v1/health")
            began = time.perf_counter()
            first = seed_search(url)  # sent as soon as liveness answers: during warm-up
            first_s = time.perf_counter() - began
            ready_s = live_s + wait_ready(url)
            began = time.perf_counter()
            later = seed_search(url)
            later_s = time.perf_counter() - began
            print(
                f"service {url} ({os.cpu_count()} CPUs): live after {live_s:.2f} s, ready after "
                f"{ready_s:.2f} s; search sent at liveness: started {queue_wait_s(first):.3f} s "
                f"after submission, {first_s:.2f} s end to end; after ready: started "
                f"{queue_wait_s(later):.3f} s after submission, {later_s:.2f} s end to end",
                flush=True,
            )
            pid = process.pid if process is not None else None
            rows = asyncio.run(main_async(args, url, str(later["id"]), pid))
            errors = sum(r.errors for r in rows)
            limited = sum(r.statuses.get("429", 0) for r in rows)
            print(f"total errors: {errors}")
            if limited:
                print(
                    f"{limited} of them are 429 rate-limited: the service's per-client limit "
                    "(every bench client shares one address). Start the service with "
                    "MESHPLAN_RATE_LIMIT_PER_S / MESHPLAN_RATE_LIMIT_BURST raised, or let the "
                    "bench start its own (no --url)."
                )
            return 1 if errors else 0
        finally:
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


if __name__ == "__main__":
    sys.exit(main())
