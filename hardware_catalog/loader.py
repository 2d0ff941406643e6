"""Loads the accelerator data files once, looks accelerators up by id or alias, and resolves a
`ClusterSpec` into a `ResolvedCluster` with every catalog default filled in.

The data files live in `hardware_catalog/data/accelerators/<id>.json` (one accelerator each;
`hardware_catalog/data/README.md` documents where every number comes from). Besides the
per-field schema checks, loading enforces the rules that span fields or files: file name =
id, lower-case hyphenated ids, known precision keys, no id/alias claimed by two entries, a
peer bandwidth no larger than the aggregate, and a node no larger than its scale-up domain.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

from pydantic import ValidationError

from hardware_catalog.schema import AcceleratorSpec, ResolvedCluster, ResolvedNodeGroup
from specs.cluster import MAX_TOTAL_GPUS, ClusterSpec
from specs.errors import CatalogLookupError, PlannerError, SpecError

PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp32", "tf32", "int8", "fp4")
"""Keys allowed in `AcceleratorSpec.peak_tflops` (`int8` is TOPS)."""

_ID_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SEPARATORS = re.compile(r"[\s_-]+")
_MAX_SUGGEST_LEN = 200  # difflib is quadratic: no suggestions for absurdly long names
_NUM_SUGGESTIONS = 3


class CatalogDataError(PlannerError):
    """A data file in the hardware catalog is missing, malformed or inconsistent (a bug in
    the shipped data, never the user's input)."""

    problem_type = "catalog-data-error"
    title = "Invalid hardware catalog data"
    status = 500


@dataclass(frozen=True)
class _Catalog:
    by_id: dict[str, AcceleratorSpec]
    index: dict[str, str]
    """Normalised id or alias -> id."""


def normalize_accelerator_name(name: str) -> str:
    """Lookup key for an id or alias: lower-case, runs of spaces / `_` / `-` become one `-`.

    `"H100_SXM"`, `"h100 sxm"` and `" H100--SXM "` all give `"h100-sxm"`.
    """
    return _SEPARATORS.sub("-", name.strip().lower()).strip("-")


def _accelerator_dir() -> Path:
    # Next to this module rather than importlib.resources: a stale editable install can
    # present the package as a namespace, whose resource reader rejects non-folder paths.
    return Path(__file__).parent / "data" / "accelerators"


def _parse_file(entry: Traversable) -> AcceleratorSpec:
    where = f"hardware catalog file {entry.name}"
    try:
        raw = json.loads(entry.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CatalogDataError(f"{where}: cannot read JSON ({exc})") from exc
    try:
        spec = AcceleratorSpec.model_validate(raw)
    except ValidationError as exc:
        raise CatalogDataError(f"{where}: {exc}") from exc
    _check_entry(spec, entry.name, where)
    return spec


def _check_entry(spec: AcceleratorSpec, file_name: str, where: str) -> None:
    if not _ID_PATTERN.fullmatch(spec.id):
        raise CatalogDataError(f"{where}: id {spec.id!r} must be lower-case and hyphenated")
    if file_name != f"{spec.id}.json":
        raise CatalogDataError(f"{where}: file name must be {spec.id}.json")
    unknown = sorted(set(spec.peak_tflops) - set(PRECISIONS))
    if unknown:
        raise CatalogDataError(f"{where}: unknown precision keys {unknown} (allowed {PRECISIONS})")
    for key, value in spec.peak_tflops.items():
        if value is not None and value <= 0:
            raise CatalogDataError(f"{where}: peak_tflops.{key} must be > 0 or null (got {value})")
    if not (spec.peak_tflops.get("bf16") or spec.peak_tflops.get("fp16")):
        raise CatalogDataError(f"{where}: needs a bf16 or fp16 peak")
    if (spec.peak_tflops.get("fp8") is None) != (spec.gemm_efficiency_fp8 is None):
        raise CatalogDataError(f"{where}: gemm_efficiency_fp8 must be set exactly when fp8 is")
    peer = spec.scale_up_peer_bandwidth_gb_s
    if peer is not None and not 0 < peer <= spec.scale_up_bandwidth_gb_s:
        raise CatalogDataError(
            f"{where}: scale_up_peer_bandwidth_gb_s ({peer}) must be in "
            f"(0, scale_up_bandwidth_gb_s ({spec.scale_up_bandwidth_gb_s})]"
        )
    if spec.gpus_per_node > spec.scale_up_domain_size:
        raise CatalogDataError(
            f"{where}: gpus_per_node ({spec.gpus_per_node}) must not exceed "
            f"scale_up_domain_size ({spec.scale_up_domain_size})"
        )


def load_accelerators(directory: Traversable) -> list[AcceleratorSpec]:
    """Read and validate every `*.json` accelerator file in `directory` (uncached).

    Args:
        directory: a folder of `<id>.json` files in the `AcceleratorSpec` schema.

    Returns:
        The accelerators sorted by id.

    Raises:
        CatalogDataError: a file is unreadable or invalid, the folder holds no file, or two
            entries claim the same normalised id or alias.
    """
    if not directory.is_dir():
        raise CatalogDataError(f"hardware catalog folder {directory} does not exist")
    files = sorted(
        (e for e in directory.iterdir() if e.is_file() and e.name.endswith(".json")),
        key=lambda e: e.name,
    )
    if not files:
        raise CatalogDataError(f"hardware catalog folder {directory} holds no *.json file")
    specs = [_parse_file(f) for f in files]
    _build_index(specs)
    return sorted(specs, key=lambda s: s.id)


def _build_index(specs: list[AcceleratorSpec]) -> dict[str, str]:
    index: dict[str, str] = {}
    for spec in specs:
        for name in (spec.id, *spec.aliases):
            key = normalize_accelerator_name(name)
            owner = index.get(key)
            if owner is not None:
                raise CatalogDataError(
                    f"hardware catalog: {name!r} of {spec.id!r} normalises to {key!r}, "
                    f"already taken by {owner!r}"
                )
            index[key] = spec.id
    return index


@functools.cache
def _catalog() -> _Catalog:
    specs = load_accelerators(_accelerator_dir())
    return _Catalog(by_id={s.id: s for s in specs}, index=_build_index(specs))


def list_accelerators() -> list[AcceleratorSpec]:
    """Every accelerator in the shipped catalog, sorted by id (loaded once, then cached)."""
    return list(_catalog().by_id.values())


def _suggestions(name: str) -> list[str]:
    key = normalize_accelerator_name(name)
    if not key or len(key) > _MAX_SUGGEST_LEN:
        return []
    catalog = _catalog()
    ids: list[str] = []
    for match in difflib.get_close_matches(key, list(catalog.index), n=10, cutoff=0.6):
        accelerator_id = catalog.index[match]
        if accelerator_id not in ids:
            ids.append(accelerator_id)
    return ids[:_NUM_SUGGESTIONS]


def get_accelerator(name: str) -> AcceleratorSpec:
    """Look an accelerator up by id or alias, ignoring case and space/`_`/`-` differences.

    Args:
        name: an id (`"h100-sxm"`) or alias (`"H100-SXM5-80GB"`, `"nvidia_h100_sxm5_80gb"`).

    Returns:
        The catalog entry.

    Raises:
        CatalogLookupError: (404) no entry has that id or alias; the detail names the value
            and up to three close matches (also in the `suggestions` extension).
    """
    catalog = _catalog()
    accelerator_id = catalog.index.get(normalize_accelerator_name(name))
    if accelerator_id is not None:
        return catalog.by_id[accelerator_id]
    suggestions = _suggestions(name)
    shown = name if len(name) <= _MAX_SUGGEST_LEN else name[:_MAX_SUGGEST_LEN] + "..."
    hint = (
        f"close matches: {', '.join(suggestions)}"
        if suggestions
        else "no close match; list_accelerators() / GET /v1/hardware lists every id"
    )
    raise CatalogLookupError(
        f"unknown accelerator {shown!r} ({hint})", value=shown, suggestions=suggestions
    )


def resolve_cluster(cluster: ClusterSpec) -> ResolvedCluster:
    """Look up each node group's accelerator and fill the catalog defaults.

    A null `gpus_per_node` takes the accelerator's usual node size, a null
    `intra_node_bandwidth_gb_s` its `scale_up_bandwidth_gb_s`, a null
    `inter_node_bandwidth_gb_s` its `scale_out_bandwidth_gb_s` (line rates, GB/s per GPU per
    direction). Explicit values are kept as given.

    Raises:
        SpecError: (422) a group names an unknown accelerator
            (`cluster.node_groups[i].accelerator`), or the resolved cluster has more than
            `MAX_TOTAL_GPUS` GPUs (`cluster.node_groups`).
    """
    groups: list[ResolvedNodeGroup] = []
    for i, group in enumerate(cluster.node_groups):
        try:
            accelerator = get_accelerator(group.accelerator)
        except CatalogLookupError as exc:
            field = f"cluster.node_groups[{i}].accelerator"
            rule = "must be a known accelerator id or alias"
            suggestions = exc.extensions.get("suggestions") or []
            hint = f"; close matches: {', '.join(suggestions)}" if suggestions else ""
            raise SpecError(
                field=field,
                rule=rule,
                value=group.accelerator,
                message=f"{field} {rule} (got {group.accelerator!r}){hint}",
            ) from exc
        groups.append(
            ResolvedNodeGroup(
                accelerator=accelerator,
                num_nodes=group.num_nodes,
                gpus_per_node=(
                    group.gpus_per_node
                    if group.gpus_per_node is not None
                    else accelerator.gpus_per_node
                ),
                intra_node_bandwidth_gb_s=(
                    group.intra_node_bandwidth_gb_s
                    if group.intra_node_bandwidth_gb_s is not None
                    else accelerator.scale_up_bandwidth_gb_s
                ),
                inter_node_bandwidth_gb_s=(
                    group.inter_node_bandwidth_gb_s
                    if group.inter_node_bandwidth_gb_s is not None
                    else accelerator.scale_out_bandwidth_gb_s
                ),
            )
        )
    resolved = ResolvedCluster(groups=groups)
    # ClusterSpec checks the total with 8 GPUs per node when gpus_per_node is null; the
    # catalog default can be larger (GB200: 72), so check again with the resolved sizes.
    if resolved.num_gpus > MAX_TOTAL_GPUS:
        raise SpecError(
            field="cluster.node_groups",
            rule=f"must hold at most {MAX_TOTAL_GPUS} GPUs in total",
            value=resolved.num_gpus,
        )
    return resolved
