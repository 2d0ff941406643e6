"""The lease keeper of one replica: a daemon thread that renews the leases of the searches
this replica holds every `heartbeat_interval_s` and scans for searches nobody holds (queued
ones, and running ones whose replica died and whose lease passed) every
`lease_scan_interval_s` (`app.db.leases` has the claim rules). A database error is logged
and the next round tries again: a replica that cannot renew loses its leases and its
workers stop at their next progress write."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(
        self,
        *,
        heartbeat: Callable[[], object],
        scan: Callable[[], object],
        heartbeat_interval_s: float,
        scan_interval_s: float,
    ) -> None:
        self._heartbeat, self._scan = heartbeat, scan
        self._heartbeat_s, self._scan_s = heartbeat_interval_s, scan_interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="meshplan-leases", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        now = time.monotonic()
        next_beat, next_scan = now + self._heartbeat_s, now + self._scan_s
        while not self._stop.wait(max(0.0, min(next_beat, next_scan) - time.monotonic())):
            now = time.monotonic()
            for due, job, name in (
                (next_beat, self._heartbeat, "heartbeat"),
                (next_scan, self._scan, "scan"),
            ):
                if now >= due:
                    try:
                        job()
                    except Exception:
                        logger.exception("lease %s failed; retrying next round", name)
            if now >= next_beat:
                next_beat = now + self._heartbeat_s
            if now >= next_scan:
                next_scan = now + self._scan_s
