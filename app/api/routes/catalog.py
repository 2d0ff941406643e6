"""Catalog resources: accelerators, systems, fabrics, model presets, model resolution, cost
models and training framework profiles."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body
from fastapi.concurrency import run_in_threadpool

from app.api.params import (
    AcceleratorId,
    EngineName,
    FabricId,
    FrameworkName,
    PresetName,
    SystemId,
)
from app.examples import RESOLVE_EXAMPLES
from app.schemas import (
    AcceleratorList,
    CostModelList,
    EngineList,
    EnginePublic,
    FabricList,
    FrameworkList,
    FrameworkPublic,
    ModelPresetList,
    ModelPublic,
    ModelResolveRequest,
    SystemList,
)
from app.services import planning
from hardware_catalog.schema import AcceleratorSpec, FabricSpec, SystemSpec

router = APIRouter(tags=["catalog"])


@router.get("/v1/hardware", response_model=AcceleratorList)
def list_hardware() -> dict[str, Any]:
    """List the accelerators of the hardware catalog."""
    return {"items": planning.list_hardware()}


@router.get("/v1/hardware/{accelerator_id}", response_model=AcceleratorSpec)
def read_hardware(accelerator_id: AcceleratorId) -> AcceleratorSpec:
    """Read one accelerator by id or alias."""
    return planning.get_hardware(accelerator_id)


@router.get("/v1/systems", response_model=SystemList)
def list_systems() -> dict[str, Any]:
    """List the systems (node and rack types) of the hardware catalog."""
    return {"items": planning.list_systems()}


@router.get("/v1/systems/{system_id}", response_model=SystemSpec)
def read_system(system_id: SystemId) -> SystemSpec:
    """Read one system by id or alias."""
    return planning.get_system(system_id)


@router.get("/v1/fabrics", response_model=FabricList)
def list_fabrics() -> dict[str, Any]:
    """List the fabrics (interconnect tiers with collective efficiency curves)."""
    return {"items": planning.list_fabrics()}


@router.get("/v1/fabrics/{fabric_id}", response_model=FabricSpec)
def read_fabric(fabric_id: FabricId) -> FabricSpec:
    """Read one fabric by id or alias."""
    return planning.get_fabric(fabric_id)


@router.get("/v1/model-presets", response_model=ModelPresetList)
def list_model_presets() -> dict[str, Any]:
    """List the built-in model presets with their parameter counts."""
    return {"items": planning.list_model_presets()}


@router.get("/v1/model-presets/{name}", response_model=ModelPublic)
def read_model_preset(name: PresetName) -> dict[str, Any]:
    """Read one preset: the explicit spec plus its parameter counts."""
    return planning.get_model_preset(name)


@router.post("/v1/models/resolve", response_model=ModelPublic)
async def resolve_model(
    body: Annotated[ModelResolveRequest, Body(openapi_examples=RESOLVE_EXAMPLES)],
) -> dict[str, Any]:
    """Resolve a model input (preset, hf_config or explicit spec) to the explicit spec."""
    spec = await run_in_threadpool(planning.resolve_model, body.model)
    return planning.model_public(spec)


@router.get("/v1/cost-models", response_model=CostModelList)
def list_cost_models() -> dict[str, Any]:
    """List the registered cost models."""
    return {"items": planning.list_cost_models()}


@router.get("/v1/frameworks", response_model=FrameworkList)
def list_frameworks() -> dict[str, Any]:
    """List the training framework profiles plans are priced for."""
    return {"items": planning.list_frameworks()}


@router.get("/v1/frameworks/{name}", response_model=FrameworkPublic)
def read_framework(name: FrameworkName) -> dict[str, Any]:
    """Read one training framework profile: rules, behaviour and launchers."""
    return planning.get_framework(name)


@router.get("/v1/engines", response_model=EngineList)
def list_engines() -> dict[str, Any]:
    """List the serving engine profiles serving plans are priced for."""
    return {"items": planning.list_serving_engines()}


@router.get("/v1/engines/{name}", response_model=EnginePublic)
def read_engine(name: EngineName) -> dict[str, Any]:
    """Read one serving engine profile: scheduler, host costs, options and launcher."""
    return planning.get_serving_engine(name)
