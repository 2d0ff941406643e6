"""`AsyncMeshplanClient`: the asyncio client over httpx. Same methods and arguments as
`MeshplanClient`, awaited; `list_searches` is an async iterator.

```python
async with AsyncMeshplanClient("http://127.0.0.1:8000") as mp:
    search = await mp.create_search("llama3-70b", cluster, workload)
    search = await mp.wait_for_search(search.id, on_progress=print)
    async for old in mp.list_searches(status="succeeded"):
        ...
```
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
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

__all__ = ["AsyncMeshplanClient"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
AsyncProgressCallback = Callable[[Search], Awaitable[Any] | Any]


class AsyncMeshplanClient:
    """Asynchronous client of the meshplan HTTP API (arguments as `MeshplanClient`;
    `transport` is an `httpx.AsyncBaseTransport`, e.g. `httpx.ASGITransport(app=...)`,
    which does not run the app's lifespan: enter it yourself)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
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
        self._http = httpx.AsyncClient(
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
    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMeshplanClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _timeout(self, extra_s: float) -> float | None:
        return None if self.timeout is None else self.timeout + extra_s

    async def _send(self, call: Call[Any], headers: Mapping[str, str]) -> httpx.Response:
        attempt = 0
        while True:
            try:
                return await self._http.request(
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
                    await asyncio.sleep(self.retry_backoff_s * 2**attempt)
                    attempt += 1
                    continue
                raise connection_error(exc, self.base_url) from exc
            except httpx.TransportError as exc:
                raise connection_error(exc, self.base_url) from exc

    async def _call(self, call: Call[T]) -> T:
        headers = dict(call.headers)
        key = cache_key(call.path, call.params) if call.cacheable else None
        cached = self._etags.get(key) if key else None
        if cached:
            headers["If-None-Match"] = cached[0]
        response = await self._send(call, headers)
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

    async def _pages(
        self, path: str, params: dict[str, Any], model: type[M], max_items: int | None
    ) -> AsyncIterator[M]:
        seen = 0
        query: dict[str, Any] | None = params
        while query is not None:
            body = await self._call(Call("GET", path, lambda b: b, params=query))
            for item in body.get("items") or []:
                if max_items is not None and seen >= max_items:
                    return
                seen += 1
                yield model.model_validate(item)
            if max_items is not None and seen >= max_items:
                return
            query = next_page_params(body, query)

    @staticmethod
    async def _notify(callback: AsyncProgressCallback | None, search: Search) -> None:
        if callback is None:
            return
        result = callback(search)
        if inspect.isawaitable(result):
            await result

    # ---- catalog -------------------------------------------------------------------------
    async def health(self) -> Health:
        """`GET /v1/health`: status, version and database kind."""
        return await self._call(_base.health())

    async def list_hardware(self) -> list[Accelerator]:
        """The accelerators of the hardware catalog."""
        return await self._call(_base.list_hardware())

    async def get_hardware(self, accelerator_id: str) -> Accelerator:
        """One accelerator by id or alias (`NotFound` if unknown)."""
        return await self._call(_base.get_hardware(accelerator_id))

    async def list_frameworks(self) -> list[Framework]:
        """The training framework profiles plans are priced for."""
        return await self._call(_base.list_frameworks())

    async def get_framework(self, name: str) -> Framework:
        """One framework profile by name (`NotFound` if unknown)."""
        return await self._call(_base.get_framework(name))

    async def list_presets(self) -> list[ModelInfo]:
        """The built-in model presets with their parameter counts."""
        return await self._call(_base.list_presets())

    async def get_preset(self, name: str) -> ModelInfo:
        """One preset's explicit spec plus parameter counts."""
        return await self._call(_base.get_preset(name))

    async def resolve_model(self, model: ModelArg) -> ModelInfo:
        """A model input (preset name, `{"hf_config": ...}` or a spec) as the explicit spec."""
        return await self._call(_base.resolve_model(model))

    # ---- estimate and search -------------------------------------------------------------
    async def estimate(
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
        return await self._call(
            _base.estimate(
                model, cluster, workload, plan, constraints=constraints, cost_model=cost_model
            )
        )

    async def create_search(
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
        """Start a search (`POST /v1/searches`); see `MeshplanClient.create_search`."""
        return await self._call(
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

    async def get_search(self, search_id: str) -> Search:
        """One search: status, progress, stats and error."""
        return await self._call(_base.get_search(search_id))

    def list_searches(
        self,
        *,
        status: str | None = None,
        page_size: int = 50,
        max_items: int | None = None,
    ) -> AsyncIterator[Search]:
        """Every search, newest first, page by page (`async for`)."""
        path, params = _base.searches_page(status, page_size)
        return self._pages(path, params, Search, max_items)

    async def cancel_search(self, search_id: str) -> Search:
        """Cancel a queued or running search (`Conflict` once it finished)."""
        return await self._call(_base.cancel_search(search_id))

    async def wait_for_search(
        self,
        search_id: str,
        *,
        timeout: float | None = None,
        poll_interval: float = 0.5,
        on_progress: AsyncProgressCallback | None = None,
        use_events: bool = False,
    ) -> Search:
        """Until the search finishes (see `MeshplanClient.wait_for_search`); `on_progress`
        may be a plain function or a coroutine function."""
        deadline = None if timeout is None else time.monotonic() + timeout
        search = await self.get_search(search_id)
        await self._notify(on_progress, search)
        if use_events and not search.finished:
            search = await self._follow_events(search, deadline, on_progress)
        while not search.finished:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise SearchTimeout(search, float(timeout or 0))
            await asyncio.sleep(
                poll_interval if remaining is None else min(poll_interval, remaining)
            )
            search = await self.get_search(search_id)
            await self._notify(on_progress, search)
        return search

    async def _follow_events(
        self, search: Search, deadline: float | None, on_progress: AsyncProgressCallback | None
    ) -> Search:
        read_s = self.timeout
        if deadline is not None:
            left = max(0.01, deadline - time.monotonic())
            read_s = left if read_s is None else min(read_s, left)
        try:
            async with self._http.stream(
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
                async for line in response.aiter_lines():
                    event = decoder.feed(line)
                    if event is None:
                        continue
                    search = apply_event(search, event)
                    await self._notify(on_progress, search)
                    if search.finished:
                        break
        except httpx.TransportError:
            return search
        search = await self.get_search(search.id)
        await self._notify(on_progress, search)
        return search

    # ---- plans ---------------------------------------------------------------------------
    async def list_plans(
        self, search_id: str, *, limit: int | None = None, include_dominated: bool = False
    ) -> list[Plan]:
        """A search's plans, best first (all of them, or the first `limit`); with
        `include_dominated` also the plans folded under a better one (`dominated_by`)."""
        size = min(limit or DEFAULT_PAGE_SIZE, 1000)
        path, params = _base.plans_page(search_id, size, include_dominated)
        return [plan async for plan in self._pages(path, params, Plan, limit)]

    async def get_plan(self, plan_id: str) -> Plan:
        """One stored plan (training or serving)."""
        return await self._call(_base.get_plan(plan_id))

    async def export_plan(self, plan_id: str, format: str, **params: Any) -> Export:
        """A plan rendered for a launcher (see `MeshplanClient.export_plan`)."""
        return await self._call(_base.export_plan(plan_id, format, params))

    # ---- MoE, measurements, calibration --------------------------------------------------
    async def expert_placements(
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
        return await self._call(
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

    async def create_measurement(
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
        return await self._call(
            _base.create_measurement(
                plan_id,
                step_time_s=step_time_s,
                tokens_per_s=tokens_per_s,
                peak_memory_gib=peak_memory_gib,
                notes=notes,
                measured_at=measured_at,
            )
        )

    async def list_measurements(self, plan_id: str) -> list[Measurement]:
        """A plan's measurements, oldest first."""
        path, params = _base.measurements_page(plan_id, DEFAULT_PAGE_SIZE)
        return [m async for m in self._pages(path, params, Measurement, None)]

    async def calibration(self, accelerator: str) -> Calibration:
        """The calibrated cost model's current fit for one accelerator."""
        return await self._call(_base.calibration(accelerator))
