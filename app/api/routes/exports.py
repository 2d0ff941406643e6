"""Plan exports: `GET /v1/plans/{plan_id}/export/{format}` (API.md "Exports")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.api.auth import Reader
from app.api.deps import SessionDep
from app.api.params import ExportFormat, PlanId
from app.db import crud
from app.exports import FORMATS, export_plan
from app.exports.kubernetes import SERVING_FRAMEWORKS, TRAINING_FRAMEWORKS
from app.exports.parameters import MAX_CPUS
from app.exports.registry import StoredPlanUnreadable
from specs.errors import NotFound

router = APIRouter(tags=["exports"])


# The query options are declared for the OpenAPI document (names, enums, patterns); their
# values are checked by `app.exports.parameters.RULES` so that a bad one is a problem naming its
# rule, and each format reads the ones it takes.
FrameworkOption = Annotated[
    str | None,
    Query(
        description="slurm and kubernetes: the framework the job runs (training: "
        f"{', '.join(TRAINING_FRAMEWORKS)}, default megatron; serving: "
        f"{', '.join(SERVING_FRAMEWORKS)}, default vllm).",
        json_schema_extra={"enum": [*TRAINING_FRAMEWORKS, *SERVING_FRAMEWORKS]},
    ),
]
KindOption = Annotated[
    str | None,
    Query(
        description="kubernetes training plans: the job resource, a Kubeflow PyTorchJob "
        "(default) or a JobSet.",
        json_schema_extra={"enum": ["pytorchjob", "jobset"]},
    ),
]
ImageOption = Annotated[
    str | None,
    Query(
        description="kubernetes: the container image of the job's pods, "
        "`[registry/]name[:tag][@digest]`.",
        max_length=512,
    ),
]
RouterImageOption = Annotated[
    str | None,
    Query(
        description="kubernetes serving plans across node groups: the nginx image of the "
        "weighted router, `[registry/]name[:tag][@digest]`.",
        max_length=512,
    ),
]
CpusOption = Annotated[
    str | None,
    Query(
        description=f"slurm: CPUs per task (`#SBATCH --cpus-per-task`), an integer 1–{MAX_CPUS}.",
        json_schema_extra={"pattern": "^[0-9]+$"},
    ),
]
TimeOption = Annotated[
    str | None,
    Query(
        description="slurm: the job's time limit (`#SBATCH --time`): MM, MM:SS, HH:MM:SS, "
        "D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED or INFINITE.",
        json_schema_extra={"examples": ["04:00:00", "2-00:00:00"]},
    ),
]


@router.get("/v1/plans/{plan_id}/export/{format}")
def export(
    plan_id: PlanId,
    format: ExportFormat,
    session: SessionDep,
    principal: Reader,
    framework: FrameworkOption = None,
    kind: KindOption = None,
    image: ImageOption = None,
    router_image: RouterImageOption = None,
    cpus_per_task: CpusOption = None,
    time: TimeOption = None,
) -> dict[str, Any]:
    """Render a plan for a launcher: Megatron-LM, torchtitan, DeepSpeed, vLLM, SGLang, Slurm
    or Kubernetes.

    Answers `{"format", "filename", "content", "args", "env", "notes"}` (and `roles` for
    disaggregated serving plans, `groups`, each node group's command, for serving plans
    across node groups, which launch behind a weighted nginx router). Query parameters:
    `framework` (slurm and kubernetes: megatron, torchtitan or deepspeed for training;
    vllm, sglang or trtllm for serving), `kind` (kubernetes training: pytorchjob or
    jobset), `image` and `router_image` (kubernetes), `cpus_per_task` and `time` (slurm). A plan the format cannot express is a 422 problem naming the rule; an
    unknown format is a 422 listing the formats.
    """
    record = crud.get_plan(session=session, plan_id=plan_id, tenant=principal.tenant)
    if record is None:
        raise NotFound(f"no plan with id {plan_id!r}", id=plan_id)
    search = crud.get_search(session=session, search_id=record.search_id)
    if search is None:
        raise StoredPlanUnreadable(f"plan {plan_id!r} has no search", id=plan_id)
    given = {
        "framework": framework,
        "kind": kind,
        "image": image,
        "router_image": router_image,
        "cpus_per_task": cpus_per_task,
        "time": time,
    }
    options = {name: value for name, value in given.items() if value is not None}
    result = export_plan({"id": record.id, "plan": record.plan}, search.problem, format, options)
    return result.to_dict()


__all__ = ["FORMATS", "router"]
