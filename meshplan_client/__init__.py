"""meshplan's Python client: `MeshplanClient` (sync) and `AsyncMeshplanClient` (asyncio)
over httpx, with typed results (pydantic models that keep unknown members) and RFC 9457
problems raised as `MeshplanError` subclasses. It depends on httpx and pydantic only, so it
can be used without the service's own packages."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from meshplan_client.async_client import AsyncMeshplanClient
from meshplan_client.client import MeshplanClient
from meshplan_client.errors import (
    Conflict,
    InvalidInput,
    MeshplanConnectionError,
    MeshplanError,
    NotFound,
    SearchTimeout,
)
from meshplan_client.models import (
    Accelerator,
    Calibration,
    Estimate,
    Export,
    FieldError,
    Framework,
    FrameworkOption,
    Health,
    Measurement,
    Metrics,
    ModelInfo,
    Parallelism,
    Placement,
    Plan,
    PlanWarning,
    Problem,
    Progress,
    Search,
    ServingInstance,
    ServingParallelism,
    Violation,
)

try:
    __version__ = _version("meshplan")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "Accelerator",
    "AsyncMeshplanClient",
    "Calibration",
    "Conflict",
    "Estimate",
    "Export",
    "FieldError",
    "Framework",
    "FrameworkOption",
    "Health",
    "InvalidInput",
    "Measurement",
    "MeshplanClient",
    "MeshplanConnectionError",
    "MeshplanError",
    "Metrics",
    "ModelInfo",
    "NotFound",
    "Parallelism",
    "Placement",
    "Plan",
    "PlanWarning",
    "Problem",
    "Progress",
    "Search",
    "SearchTimeout",
    "ServingInstance",
    "ServingParallelism",
    "Violation",
    "__version__",
]
