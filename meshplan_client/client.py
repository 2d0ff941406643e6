"""`MeshplanClient`: the synchronous client over httpx.

```python
from meshplan_client import MeshplanClient

with MeshplanClient("http://127.0.0.1:8000") as mp:
    search = mp.create_search("llama3-70b", cluster, workload, wait=30)
    search = mp.wait_for_search(search.id, timeout=600)
    best = mp.list_plans(search.id, limit=1)[0]
    script = mp.export_plan(best.id, "slurm").content
```
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from meshplan_client import _base
from meshplan_client._base import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_TIMEOUT_S,
    ETAG_CACHE_SIZE,
    BodyArg,
    Call,
    ModelArg,
    SSEDecoder,
    apply_event,
    auth_headers,
    cache_key,
    json_body,
    next_page_params,
    resolve_base_url,
    user_agent,
)
from meshplan_client.errors import SearchTimeout, connection_error, error_from_response
from meshplan_client.models import (
    Accelerator,
    Calibration,
    Estimate,
    Export,
    Framework,
    Health,
    Measurement,
    ModelInfo,
    Placement,
    Plan,
    Search,
)

__all__ = ["MeshplanClient"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
ProgressCallback = Callable[[Search], Any]


class MeshplanClient:
    """Synchronous client of the meshplan HTTP API.

    Args:
        base_url: service root (default `$MESHPLAN_URL`, else http://127.0.0.1:8000).
        timeout: seconds per request (`?wait=` calls get their wait on top); None: no limit.
        transport: an httpx transport, e.g. `httpx.MockTransport` in tests.
        headers: extra headers on every request.
        retries: resends after a connection failure, for idempotent calls only (GETs,
            `cancel_search`, pure computations, and `create_search` with an `idempotency_key`).
        retry_backoff_s: first pause between resends (doubling each time).
        api_key: an API key sent as `Authorization: Bearer <key>` (default
            `$MESHPLAN_API_KEY`; none needed when the service runs with MESHPLAN_AUTH=off).

    Errors come as `MeshplanError` subclasses carrying the service's RFC 9457 problem.
    GETs of a search or plan are re-validated with `If-None-Match` when the service sends
    ETags (a 304 answers from the cached body).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        retries: int = 2,
        retry_backoff_s: float = 0.25,
        api_key: str | None = None,
    ) -> None:
        self.base_url = resolve_base_url(base_url)
        self.timeout = timeout
        self.retries = max(0, retries)
        self.retry_backoff_s = retry_backoff_s
        self._etags: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={
                "User-Agent": user_agent(),
                "Accept": "application/json",
                **auth_headers(api_key),
                **(headers or {}),
            },
        )

    # ---- plumbing ------------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MeshplanClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _timeout(self, extra_s: float) -> float | None:
        return None if self.timeout is None else self.timeout + extra_s

    def _send(self, call: Call[Any], headers: Mapping[str, str]) -> httpx.Response:
        attempt = 0
        while True:
            try:
                return self._http.request(
                    call.method,
                    call.path,
                    params=call.params,
                    json=call.json,
                    headers=headers,
                    timeout=self._timeout(call.extra_timeout_s),
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # the request never left: resending is safe when the call is idempotent
                if call.idempotent and attempt < self.retries:
                    time.sleep(self.retry_backoff_s * 2**attempt)
                    attempt += 1
                    continue
                raise connection_error(exc, self.base_url) from exc
            except httpx.TransportError as exc:
                raise connection_error(exc, self.base_url) from exc

    def _call(self, call: Call[T]) -> T:
        headers = dict(call.headers)
        key = cache_key(call.path, call.params) if call.cacheable else None
        cached = self._etags.get(key) if key else None
        if cached:
            headers["If-None-Match"] = cached[0]
        response = self._send(call, headers)
        if response.status_code == 304 and key and cached:
            self._etags.move_to_end(key)
            return call.parse(cached[1])
        if response.status_code >= 400:
            raise error_from_response(response)
        body = json_body(response)
        etag = response.headers.get("etag")
        if key and etag:
            self._etags[key] = (etag, body)
            self._etags.move_to_end(key)
            while len(self._etags) > ETAG_CACHE_SIZE:
                self._etags.popitem(last=False)
        return call.parse(body)

    def _pages(
        self, path: str, params: dict[str, Any], model: type[M], max_items: int | None
    ) -> Iterator[M]:
        seen = 0
        query: dict[str, Any] | None = params
        while query is not None:
            body = self._call(Call("GET", path, lambda b: b, params=query))
            for item in body.get("items") or []:
                if max_items is not None and seen >= max_items:
                    return
                seen += 1
                yield model.model_validate(item)
            if max_items is not None and seen >= max_items:
                return
            query = next_page_params(body, query)

    # ---- catalog -------------------------------------------------------------------------
    def health(self) -> Health:
        """`GET /v1/health`: status, version and database kind."""
        return self._call(_base.health())

    def list_hardware(self) -> list[Accelerator]:
        """The accelerators of the hardware catalog."""
        return self._call(_base.list_hardware())

    def get_hardware(self, accelerator_id: str) -> Accelerator:
        """One accelerator by id or alias (`NotFound` if unknown)."""
        return self._call(_base.get_hardware(accelerator_id))

    def list_frameworks(self) -> list[Framework]:
        """The training framework profiles plans are priced for."""
        return self._call(_base.list_frameworks())

    def get_framework(self, name: str) -> Framework:
        """One framework profile by name (`NotFound` if unknown)."""
        return self._call(_base.get_framework(name))

    def list_presets(self) -> list[ModelInfo]:
        """The built-in model presets with their parameter counts."""
        return self._call(_base.list_presets())

    def get_preset(self, name: str) -> ModelInfo:
        """One preset's explicit spec plus parameter counts."""
        return self._call(_base.get_preset(name))

    def resolve_model(self, model: ModelArg) -> ModelInfo:
        """A model input (preset name, `{"hf_config": ...}` or a spec) as the explicit spec."""
        return self._call(_base.resolve_model(model))

    # ---- estimate and search -------------------------------------------------------------
    def estimate(
        self,
        model: ModelArg,
        cluster: BodyArg,
        workload: BodyArg,
        plan: Plan | BodyArg,
        *,
        constraints: BodyArg | None = None,
        cost_model: BodyArg | None = None,
    ) -> Estimate:
        """Price one plan (a mapping, or a stored `Plan`: its plan fields are sent)."""
        return self._call(
            _base.estimate(
                model, cluster, workload, plan, constraints=constraints, cost_model=cost_model
            )
        )

    def create_search(
        self,
        model: ModelArg,
        cluster: BodyArg,
        workload: BodyArg,
        *,
        constraints: BodyArg | None = None,
        objective: str | None = None,
        top_k: int | None = None,
        cost_model: BodyArg | None = None,
        wait: float | None = None,
        idempotency_key: str | None = None,
        callback_url: str | None = None,
        **extra: Any,
    ) -> Search:
        """Start a search (`POST /v1/searches`).

        Args:
            wait: seconds the service may block for the result (`?wait=`); the search comes
                back finished when it ended in time, else queued or running.
            idempotency_key: `Idempotency-Key` header: the same key and body give the same
                search (and make the call safe to resend); a different body is a `Conflict`.
            callback_url: the service POSTs the finished search there (signed webhook).
            extra: further body members, passed as given.
        """
        return self._call(
            _base.create_search(
                model,
                cluster,
                workload,
                constraints=constraints,
                objective=objective,
                top_k=top_k,
                cost_model=cost_model,
                callback_url=callback_url,
                wait=wait,
                idempotency_key=idempotency_key,
                extra=extra,
            )
        )

    def get_search(self, search_id: str) -> Search:
        """One search: status, progress, stats and error."""
        return self._call(_base.get_search(search_id))

    def list_searches(
        self,
        *,
        status: str | None = None,
        page_size: int = 50,
        max_items: int | None = None,
    ) -> Iterator[Search]:
        """Every search, newest first, fetched page by page as the iterator advances (by
        `next_cursor` when the service gives one, else by offset)."""
        path, params = _base.searches_page(status, page_size)
        return self._pages(path, params, Search, max_items)

    def cancel_search(self, search_id: str) -> Search:
        """Cancel a queued or running search (`Conflict` once it finished)."""
        return self._call(_base.cancel_search(search_id))

    def wait_for_search(
        self,
        search_id: str,
        *,
        timeout: float | None = None,
        poll_interval: float = 0.5,
        on_progress: ProgressCallback | None = None,
        use_events: bool = False,
    ) -> Search:
        """Block until the search finishes; returns it (check `status`: a failed search
        carries its problem in `error`).

        Args:
            timeout: seconds before `SearchTimeout` (None: no limit).
            poll_interval: seconds between two reads of the search.
            on_progress: called with the search after every read (or event).
            use_events: follow `GET /v1/searches/{id}/events` (Server-Sent Events) and fall
                back to polling when the service has no such stream or it breaks.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        search = self.get_search(search_id)
        if on_progress:
            on_progress(search)
        if use_events and not search.finished:
            search = self._follow_events(search, deadline, on_progress)
        while not search.finished:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise SearchTimeout(search, float(timeout or 0))
            time.sleep(poll_interval if remaining is None else min(poll_interval, remaining))
            search = self.get_search(search_id)
            if on_progress:
                on_progress(search)
        return search

    def _follow_events(
        self, search: Search, deadline: float | None, on_progress: ProgressCallback | None
    ) -> Search:
        """Read the event stream until it reports a final status, ends or fails; then
        re-read the search (the stored state is the authority)."""
        read_s = self.timeout
        if deadline is not None:
            left = max(0.01, deadline - time.monotonic())
            read_s = left if read_s is None else min(read_s, left)
        try:
            with self._http.stream(
                "GET",
                _base.search_events_path(search.id),
                headers={"Accept": "text/event-stream"},
                timeout=httpx.Timeout(self.timeout, read=read_s),
            ) as response:
                if response.status_code >= 400 or not response.headers.get(
                    "content-type", ""
                ).startswith("text/event-stream"):
                    return search
                decoder = SSEDecoder()
                for line in response.iter_lines():
                    event = decoder.feed(line)
                    if event is None:
                        continue
                    search = apply_event(search, event)
                    if on_progress:
                        on_progress(search)
                    if search.finished:
                        break
        except httpx.TransportError:
            return search
        search = self.get_search(search.id)
        if on_progress:
            on_progress(search)
        return search

    # ---- plans ---------------------------------------------------------------------------
    def list_plans(
        self, search_id: str, *, limit: int | None = None, include_dominated: bool = False
    ) -> list[Plan]:
        """A search's plans, best first (all of them, or the first `limit`); with
        `include_dominated` also the plans folded under a better one (`dominated_by`)."""
        size = min(limit or DEFAULT_PAGE_SIZE, 1000)
        path, params = _base.plans_page(search_id, size, include_dominated)
        return list(self._pages(path, params, Plan, limit))

    def get_plan(self, plan_id: str) -> Plan:
        """One stored plan (training or serving)."""
        return self._call(_base.get_plan(plan_id))

    def export_plan(self, plan_id: str, format: str, **params: Any) -> Export:
        """A plan rendered for a launcher: `megatron`, `torchtitan`, `deepspeed`, `vllm`,
        `sglang`, `slurm` or `kubernetes` (`params` go to the query string).
        A plan the format cannot express raises `InvalidInput` naming the rule."""
        return self._call(_base.export_plan(plan_id, format, params))

    # ---- MoE, measurements, calibration --------------------------------------------------
    def expert_placements(
        self,
        loads: list[list[float]],
        *,
        num_ranks: int,
        ranks_per_node: int,
        num_redundant: int = 0,
        num_groups: int | None = None,
        coactivation: list[list[list[float]]] | None = None,
        time_limit_s: float | None = None,
    ) -> Placement:
        """Place experts (and redundant copies) on ranks to balance `loads[layer][expert]`."""
        return self._call(
            _base.expert_placements(
                loads,
                num_ranks=num_ranks,
                ranks_per_node=ranks_per_node,
                num_redundant=num_redundant,
                num_groups=num_groups,
                coactivation=coactivation,
                time_limit_s=time_limit_s,
            )
        )

    def create_measurement(
        self,
        plan_id: str,
        *,
        step_time_s: float | None = None,
        tokens_per_s: float | None = None,
        peak_memory_gib: float | list[float] | None = None,
        notes: str | None = None,
        measured_at: str | None = None,
    ) -> Measurement:
        """Record what a plan measured when it ran (never resent automatically)."""
        return self._call(
            _base.create_measurement(
                plan_id,
                step_time_s=step_time_s,
                tokens_per_s=tokens_per_s,
                peak_memory_gib=peak_memory_gib,
                notes=notes,
                measured_at=measured_at,
            )
        )

    def list_measurements(self, plan_id: str) -> list[Measurement]:
        """A plan's measurements, oldest first."""
        path, params = _base.measurements_page(plan_id, DEFAULT_PAGE_SIZE)
        return list(self._pages(path, params, Measurement, None))

    def calibration(self, accelerator: str) -> Calibration:
        """The calibrated cost model's current fit for one accelerator."""
        return self._call(_base.calibration(accelerator))
