"""What the sync and async clients share: each endpoint as a `Call` (method, path, query,
body, headers, whether a retry is safe, how to parse the answer), body helpers, list
pagination and a Server-Sent Events decoder. Nothing here does I/O."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from meshplan_client.errors import MeshplanError
from meshplan_client.models import (
    TERMINAL_STATUSES,
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
    Problem,
    Search,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_PAGE_SIZE = 100
ETAG_CACHE_SIZE = 256
"""GET answers kept for `If-None-Match` re-reads (least recently used are dropped)."""

ModelArg = str | Mapping[str, Any] | BaseModel
"""A preset name, or a model input (`{"preset"}`, `{"hf_config"}` or an explicit spec)."""
BodyArg = Mapping[str, Any] | BaseModel


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP exchange with the service and how to read its answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, Any] | None = None
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool = True
    """Safe to send again after a connection failure."""
    extra_timeout_s: float = 0.0
    """Added to the client timeout (`?wait=` blocks on the server)."""
    cacheable: bool = False
    """A GET whose answer may be re-validated with its ETag."""


def user_agent() -> str:
    from meshplan_client import __version__

    return f"meshplan-client/{__version__}"


def resolve_base_url(base_url: str | None) -> str:
    """`base_url`, else `$MESHPLAN_URL`, else http://127.0.0.1:8000 (no trailing slash)."""
    return (base_url or os.environ.get("MESHPLAN_URL") or DEFAULT_URL).rstrip("/")


def auth_headers(api_key: str | None) -> dict[str, str]:
    """`Authorization: Bearer <key>` for `api_key`, else `$MESHPLAN_API_KEY`; none without
    either (a service with MESHPLAN_AUTH=off needs none)."""
    key = api_key or os.environ.get("MESHPLAN_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def json_body(response: httpx.Response) -> Any:
    """The JSON of a 2xx answer (None when empty); a non-JSON answer is an error."""
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise MeshplanError(
            Problem(
                title="Unexpected answer",
                status=response.status_code,
                detail=f"expected JSON, got {response.text[:200]!r}",
            ),
            response,
        ) from None


def cache_key(path: str, params: Mapping[str, Any] | None) -> str:
    return path + "?" + "&".join(f"{k}={v}" for k, v in sorted((params or {}).items()))


# ---- bodies --------------------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """pydantic models → JSON-ready dicts (None members dropped); mappings → dicts."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def model_input(model: ModelArg) -> dict[str, Any]:
    """A preset name becomes `{"preset": name}`; anything else passes as given."""
    if isinstance(model, str):
        return {"preset": model}
    body = jsonable(model)
    if not isinstance(body, dict):
        raise TypeError(f"model must be a preset name or a mapping, not {type(model).__name__}")
    return body


def plan_input(plan: Plan | BodyArg) -> dict[str, Any]:
    """A stored `Plan` contributes its plan fields only; a mapping passes as given."""
    if isinstance(plan, Plan):
        return plan.plan_fields()
    body = jsonable(plan)
    if not isinstance(body, dict):
        raise TypeError(f"plan must be a Plan or a mapping, not {type(plan).__name__}")
    return body


def query_value(value: Any) -> Any:
    """Booleans as `true`/`false` (what FastAPI parses); the rest unchanged."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _seg(value: str) -> str:
    return quote(str(value), safe="")


def _parser(model: type[M]) -> Callable[[Any], M]:
    return model.model_validate


def _items(model: type[M]) -> Callable[[Any], list[M]]:
    def parse(body: Any) -> list[M]:
        return [model.model_validate(item) for item in body["items"]]

    return parse


def _optional(**values: Any) -> dict[str, Any]:
    return {k: jsonable(v) for k, v in values.items() if v is not None}


# ---- endpoints -----------------------------------------------------------------------------
def health() -> Call[Health]:
    return Call("GET", "/v1/health", _parser(Health))


def list_hardware() -> Call[list[Accelerator]]:
    return Call("GET", "/v1/hardware", _items(Accelerator))


def get_hardware(accelerator_id: str) -> Call[Accelerator]:
    return Call("GET", f"/v1/hardware/{_seg(accelerator_id)}", _parser(Accelerator))


def list_frameworks() -> Call[list[Framework]]:
    return Call("GET", "/v1/frameworks", _items(Framework))


def get_framework(name: str) -> Call[Framework]:
    return Call("GET", f"/v1/frameworks/{_seg(name)}", _parser(Framework))


def list_presets() -> Call[list[ModelInfo]]:
    return Call("GET", "/v1/model-presets", _items(ModelInfo))


def get_preset(name: str) -> Call[ModelInfo]:
    return Call("GET", f"/v1/model-presets/{_seg(name)}", _parser(ModelInfo))


def resolve_model(model: ModelArg) -> Call[ModelInfo]:
    return Call(
        "POST", "/v1/models/resolve", _parser(ModelInfo), json={"model": model_input(model)}
    )


def estimate(
    model: ModelArg,
    cluster: BodyArg,
    workload: BodyArg,
    plan: Plan | BodyArg,
    *,
    constraints: BodyArg | None = None,
    cost_model: BodyArg | None = None,
) -> Call[Estimate]:
    body = {
        "model": model_input(model),
        "cluster": jsonable(cluster),
        "workload": jsonable(workload),
        "plan": plan_input(plan),
        **_optional(constraints=constraints, cost_model=cost_model),
    }
    return Call("POST", "/v1/estimate", _parser(Estimate), json=body)


def create_search(
    model: ModelArg,
    cluster: BodyArg,
    workload: BodyArg,
    *,
    constraints: BodyArg | None = None,
    objective: str | None = None,
    top_k: int | None = None,
    cost_model: BodyArg | None = None,
    callback_url: str | None = None,
    wait: float | None = None,
    idempotency_key: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Call[Search]:
    body = {
        "model": model_input(model),
        "cluster": jsonable(cluster),
        "workload": jsonable(workload),
        **_optional(
            constraints=constraints,
            objective=objective,
            top_k=top_k,
            cost_model=cost_model,
            callback_url=callback_url,
        ),
        **jsonable(extra or {}),
    }
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    params = {"wait": wait} if wait else None
    # without a key a resent POST could start a second search; with one it cannot
    return Call(
        "POST",
        "/v1/searches",
        _parser(Search),
        params=params,
        json=body,
        headers=headers,
        idempotent=idempotency_key is not None,
        extra_timeout_s=float(wait or 0.0),
    )


def get_search(search_id: str) -> Call[Search]:
    return Call("GET", f"/v1/searches/{_seg(search_id)}", _parser(Search), cacheable=True)


def cancel_search(search_id: str) -> Call[Search]:
    return Call("POST", f"/v1/searches/{_seg(search_id)}/cancel", _parser(Search))


def search_events_path(search_id: str) -> str:
    return f"/v1/searches/{_seg(search_id)}/events"


def searches_page(status: str | None, page_size: int) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {"limit": page_size}
    if status is not None:
        params["status"] = status
    return "/v1/searches", params


def plans_page(
    search_id: str, page_size: int, include_dominated: bool = False
) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {"limit": page_size}
    if include_dominated:
        params["include_dominated"] = "true"
    return f"/v1/searches/{_seg(search_id)}/plans", params


def measurements_page(plan_id: str, page_size: int) -> tuple[str, dict[str, Any]]:
    return f"/v1/plans/{_seg(plan_id)}/measurements", {"limit": page_size}


def get_plan(plan_id: str) -> Call[Plan]:
    return Call("GET", f"/v1/plans/{_seg(plan_id)}", _parser(Plan), cacheable=True)


def export_plan(plan_id: str, fmt: str, params: Mapping[str, Any]) -> Call[Export]:
    query = {k: query_value(v) for k, v in params.items() if v is not None}
    return Call(
        "GET",
        f"/v1/plans/{_seg(plan_id)}/export/{_seg(fmt)}",
        _parser(Export),
        params=query or None,
    )


def expert_placements(
    loads: list[list[float]],
    *,
    num_ranks: int,
    ranks_per_node: int,
    num_redundant: int = 0,
    num_groups: int | None = None,
    coactivation: list[list[list[float]]] | None = None,
    time_limit_s: float | None = None,
) -> Call[Placement]:
    body = {
        "loads": loads,
        "num_ranks": num_ranks,
        "ranks_per_node": ranks_per_node,
        "num_redundant": num_redundant,
        **_optional(num_groups=num_groups, coactivation=coactivation, time_limit_s=time_limit_s),
    }
    return Call("POST", "/v1/expert-placements", _parser(Placement), json=body)


def create_measurement(
    plan_id: str,
    *,
    step_time_s: float | None = None,
    tokens_per_s: float | None = None,
    peak_memory_gib: float | list[float] | None = None,
    notes: str | None = None,
    measured_at: str | None = None,
) -> Call[Measurement]:
    body = _optional(
        step_time_s=step_time_s,
        tokens_per_s=tokens_per_s,
        peak_memory_gib=peak_memory_gib,
        notes=notes,
        measured_at=measured_at,
    )
    # each POST stores one more measurement: never resent
    return Call(
        "POST",
        f"/v1/plans/{_seg(plan_id)}/measurements",
        _parser(Measurement),
        json=body,
        idempotent=False,
    )


def calibration(accelerator: str) -> Call[Calibration]:
    return Call("GET", "/v1/calibration", _parser(Calibration), params={"accelerator": accelerator})


# ---- pagination ----------------------------------------------------------------------------
def next_page_params(body: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The query of the page after `body`, or None at the end.

    A list answer with a `next_cursor` member pages by cursor (`?cursor=`; null: last page);
    one without pages by `offset` until a page is empty or `total` items were read."""
    items = body.get("items") or []
    if "next_cursor" in body:
        cursor = body.get("next_cursor")
        if not cursor:
            return None
        return {**{k: v for k, v in params.items() if k != "offset"}, "cursor": cursor}
    if not items:
        return None
    offset = int(params.get("offset", 0)) + len(items)
    total = body.get("total")
    if isinstance(total, int) and offset >= total:
        return None
    return {**params, "offset": offset}


# ---- progress events -----------------------------------------------------------------------
@dataclass
class ServerSentEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None


class SSEDecoder:
    """Line-by-line decoder of a `text/event-stream` (WHATWG HTML, "Server-sent events",
    §9.2.6 "Interpreting an event stream"): `field: value` lines, `:` comments, a blank line
    dispatches the event; `data` lines join with newlines."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> ServerSentEvent | None:
        line = line.rstrip("\r\n")
        if not line:
            if not self._data and not self._event:
                return None
            event = ServerSentEvent(self._event or "message", "\n".join(self._data), self._id)
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


def apply_event(search: Search, event: ServerSentEvent) -> Search:
    """The search after one progress event. The event's JSON data may be the whole search,
    `{"search": {...}}`, or a partial update (`status`, `progress`, or bare `evaluated` /
    `total`); an event named after a final status finishes the search."""
    try:
        data: Any = json.loads(event.data) if event.data else {}
    except ValueError:
        data = {}
    if isinstance(data, dict) and isinstance(data.get("search"), dict):
        data = data["search"]
    if not isinstance(data, dict) or data.get("id", search.id) != search.id:
        data = {}
    update = dict(data)
    if "evaluated" in update and "progress" not in update:
        update["progress"] = {
            "evaluated": update.pop("evaluated"),
            "total": update.pop("total", search.progress.total),
        }
    if "status" not in update and event.event in TERMINAL_STATUSES:
        update["status"] = event.event
    if not update:
        return search
    merged = search.model_dump(mode="json")
    merged.update(update)
    return Search.model_validate(merged)
