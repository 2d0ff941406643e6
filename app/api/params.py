"""Path, query and header parameters shared by several routes, with their OpenAPI
descriptions written once (`Annotated` types: FastAPI reads the `Path` / `Query` / `Header`
metadata; validation is unchanged)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from app.exports import FORMATS

SearchId = Annotated[
    str, Path(description="The search's id (a UUID, the `id` `POST /v1/searches` answered).")
]
PlanId = Annotated[
    str,
    Path(description="The plan's id (a UUID: `items[].id` of `GET /v1/searches/{id}/plans`)."),
]
MeasurementId = Annotated[
    str,
    Path(
        description="The measurement's id (a UUID, the `id` `POST /v1/plans/{plan_id}/"
        "measurements` answered)."
    ),
]
KeyId = Annotated[
    str, Path(description="The API key's id (a UUID, the `id` `POST /v1/admin/api-keys` answered).")
]
AcceleratorId = Annotated[
    str,
    Path(
        description="Catalog id or alias of the accelerator (`h100-sxm`, `H100`), ignoring "
        "case and space / `_` / `-` differences."
    ),
]
SystemId = Annotated[
    str,
    Path(
        description="Catalog id or alias of the system (`dgx-h100`, `gb200-nvl72`), ignoring "
        "case and space / `_` / `-` differences."
    ),
]
FabricId = Annotated[
    str,
    Path(
        description="Catalog id or alias of the fabric (`nvlink4-nvswitch`, "
        "`infiniband-ndr`), ignoring case and space / `_` / `-` differences."
    ),
]
PresetName = Annotated[
    str,
    Path(description="Name or alias of a model preset (`llama3-70b`), case-insensitive."),
]
FrameworkName = Annotated[
    str,
    Path(
        description="Registered name of a training framework profile (`megatron_core`, "
        "`torchtitan`, `deepspeed`, `fsdp`, `megatron_lm`; `GET /v1/frameworks`)."
    ),
]
EngineName = Annotated[
    str,
    Path(
        description="Name or alias of a serving engine profile (`vllm`, `vllm_v0`, `sglang`, "
        "`tensorrt_llm`, or `TensorRT-LLM`; `GET /v1/engines`)."
    ),
]
ExportFormat = Annotated[
    str,
    Path(
        description=f"Export format, case-insensitive: {', '.join(f'`{f}`' for f in FORMATS)}.",
        json_schema_extra={"enum": list(FORMATS)},
    ),
]
CursorQuery = Annotated[
    str | None, Query(max_length=1000, description="`next_cursor` of the previous page.")
]


def limit_description(default: int, most: int) -> str:
    """The `?limit=` description of a list with these bounds."""
    return f"Items per page, count (1..{most}; default {default})."


__all__ = [
    "AcceleratorId",
    "CursorQuery",
    "EngineName",
    "ExportFormat",
    "FabricId",
    "FrameworkName",
    "KeyId",
    "MeasurementId",
    "PlanId",
    "PresetName",
    "SearchId",
    "SystemId",
    "limit_description",
]
