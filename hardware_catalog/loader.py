"""Loads the catalog's data files once (accelerators, systems, fabrics), looks entries up by
id or alias, and resolves a `ClusterSpec` into a `ResolvedCluster` with every catalog default
filled in.

The data files live in `hardware_catalog/data/{accelerators,systems,fabrics}/<id>.json`, one
entry each (`hardware_catalog/data/README.md` documents where every number comes from).
Besides the per-field schema checks (curve points ascending, efficiencies in (0, 1.5], ...),
loading enforces the rules that span fields or files: file name = id, lower-case hyphenated
ids, no id/alias claimed by two entries of one kind, known precision keys, a peer bandwidth
no larger than the aggregate, a node no larger than its accelerator's scale-up domain, a
system domain that is a multiple or a divisor of its node, and references (system ->
accelerator and fabrics, accelerator -> default system) that exist and agree.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from hardware_catalog.schema import (
    AcceleratorSpec,
    FabricLayout,
    FabricSpec,
    ResolvedCluster,
    ResolvedNodeGroup,
    SystemSpec,
    capped_peer_bandwidth,
    default_scale_up_domain,
    same_hardware,
    usual_layout,
)
from specs.cluster import MAX_TOTAL_GPUS, ClusterSpec
from specs.errors import CatalogLookupError, PlannerError, SpecError

PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp32", "tf32", "int8", "fp4")
"""Keys allowed in `AcceleratorSpec.peak_tflops` (`int8` is TOPS)."""

_ID_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SEPARATORS = re.compile(r"[\s_-]+")
_MAX_SUGGEST_LEN = 200  # difflib is quadratic: no suggestions for absurdly long names
_NUM_SUGGESTIONS = 3

_Entry = TypeVar("_Entry", AcceleratorSpec, SystemSpec, FabricSpec)


class CatalogDataError(PlannerError):
    """A data file in the hardware catalog is missing, malformed or inconsistent (a bug in
    the shipped data, never the user's input)."""

    problem_type = "catalog-data-error"
    title = "Invalid hardware catalog data"
    status = 500


@dataclass(frozen=True)
class _Index:
    """One kind of entry: by id, and normalised id or alias -> id."""

    by_id: dict[str, BaseModel]
    names: dict[str, str]


@dataclass(frozen=True)
class Catalog:
    """Every entry of the catalog, cross-checked (`load_catalog`)."""

    accelerators: dict[str, AcceleratorSpec]
    systems: dict[str, SystemSpec]
    fabrics: dict[str, FabricSpec]


def normalize_accelerator_name(name: str) -> str:
    """Lookup key for an id or alias: lower-case, runs of spaces / `_` / `-` become one `-`.

    `"H100_SXM"`, `"h100 sxm"` and `" H100--SXM "` all give `"h100-sxm"`. Systems and fabrics
    are looked up with the same rule.
    """
    return _SEPARATORS.sub("-", name.strip().lower()).strip("-")


def _data_dir() -> Path:
    # Next to this module rather than importlib.resources: a stale editable install can
    # present the package as a namespace, whose resource reader rejects non-folder paths.
    return Path(__file__).parent / "data"


# ---- reading and checking one folder -------------------------------------------------------


def _parse_file(entry: Traversable, model: type[_Entry], where: str) -> _Entry:
    try:
        raw = json.loads(entry.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CatalogDataError(f"{where}: cannot read JSON ({exc})") from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise CatalogDataError(f"{where}: {exc}") from exc


def _check_id(spec_id: str, file_name: str, where: str) -> None:
    if not _ID_PATTERN.fullmatch(spec_id):
        raise CatalogDataError(f"{where}: id {spec_id!r} must be lower-case and hyphenated")
    if file_name != f"{spec_id}.json":
        raise CatalogDataError(f"{where}: file name must be {spec_id}.json")


def _check_accelerator(spec: AcceleratorSpec, where: str) -> None:
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
    if spec.default_system is None:
        raise CatalogDataError(f"{where}: default_system is required (a system id)")


def _check_system(spec: SystemSpec, where: str) -> None:
    if spec.host_link is None:
        raise CatalogDataError(f"{where}: host_link is required in catalog files (offloading)")
    domain, node = spec.scale_up_domain_gpus, spec.gpus_per_node
    if domain % node and node % domain:
        raise CatalogDataError(
            f"{where}: scale_up_domain_gpus ({domain}) must be a multiple of gpus_per_node "
            f"({node}) or divide it"
        )
    peer = spec.scale_up_peer_bandwidth_gb_s
    if peer is not None and peer > spec.scale_up_bandwidth_gb_s:
        raise CatalogDataError(
            f"{where}: scale_up_peer_bandwidth_gb_s ({peer}) must not exceed "
            f"scale_up_bandwidth_gb_s ({spec.scale_up_bandwidth_gb_s})"
        )


def _check_fabric(spec: FabricSpec, where: str) -> None:
    if spec.kind == "scale_up" and (
        spec.hop_latency_us is not None or spec.hop_latency_estimate_us is not None
    ):
        raise CatalogDataError(f"{where}: hop latencies apply to scale-out fabrics only")
    if spec.hop_latency_estimate_us is not None and not any(
        line.startswith("hop_latency_estimate_us:") for line in spec.unverified_fields
    ):
        raise CatalogDataError(
            f"{where}: hop_latency_estimate_us must be listed in unverified_fields"
        )


def _load_folder(
    directory: Traversable,
    model: type[_Entry],
    check: Callable[[_Entry, str], None],
    label: str,
) -> list[_Entry]:
    if not directory.is_dir():
        raise CatalogDataError(f"hardware catalog folder {directory} does not exist")
    files = sorted(
        (e for e in directory.iterdir() if e.is_file() and e.name.endswith(".json")),
        key=lambda e: e.name,
    )
    if not files:
        raise CatalogDataError(f"hardware catalog folder {directory} holds no *.json file")
    specs = []
    for entry in files:
        where = f"hardware catalog file {label}{entry.name}"
        spec = _parse_file(entry, model, where)
        _check_id(spec.id, entry.name, where)
        check(spec, where)
        specs.append(spec)
    _build_index(specs)
    return sorted(specs, key=lambda s: s.id)


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
    return _load_folder(directory, AcceleratorSpec, _check_accelerator, "")


def load_systems(directory: Traversable) -> list[SystemSpec]:
    """Read and validate every `*.json` system file in `directory` (uncached; references to
    accelerators and fabrics are checked by `load_catalog`).

    Raises:
        CatalogDataError: as `load_accelerators`, or a domain that is neither a multiple nor
            a divisor of the node, or a peer rate above the aggregate.
    """
    return _load_folder(directory, SystemSpec, _check_system, "systems/")


def load_fabrics(directory: Traversable) -> list[FabricSpec]:
    """Read and validate every `*.json` fabric file in `directory` (uncached).

    Raises:
        CatalogDataError: as `load_accelerators`, or a curve whose sizes are not strictly
            ascending or whose efficiency is outside (0, 1.5].
    """
    return _load_folder(directory, FabricSpec, _check_fabric, "fabrics/")


def _build_index(specs: Sequence[AcceleratorSpec | SystemSpec | FabricSpec]) -> dict[str, str]:
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


def _check_references(catalog: Catalog) -> None:
    for system in catalog.systems.values():
        where = f"hardware catalog file systems/{system.id}.json"
        if system.accelerator not in catalog.accelerators:
            raise CatalogDataError(f"{where}: unknown accelerator {system.accelerator!r}")
        for field, kind in (("scale_up_fabric", "scale_up"), ("scale_out_fabric", "scale_out")):
            fabric_id = getattr(system, field)
            fabric = catalog.fabrics.get(fabric_id)
            if fabric is None:
                raise CatalogDataError(f"{where}: {field} names unknown fabric {fabric_id!r}")
            if fabric.kind != kind:
                raise CatalogDataError(
                    f"{where}: {field} {fabric_id!r} is a {fabric.kind} fabric, not {kind}"
                )
        up = catalog.fabrics[system.scale_up_fabric]
        if (system.scale_up_peer_bandwidth_gb_s is None) != up.switched:
            raise CatalogDataError(
                f"{where}: scale_up_peer_bandwidth_gb_s must be set exactly when the scale-up "
                f"fabric is a point-to-point mesh ({up.id} switched={up.switched})"
            )
        out = catalog.fabrics[system.scale_out_fabric]
        expected = system.nics_per_node * out.line_rate_gb_s / system.gpus_per_node
        if not math.isclose(system.scale_out_bandwidth_gb_s, expected, rel_tol=1e-6):
            raise CatalogDataError(
                f"{where}: scale_out_bandwidth_gb_s ({system.scale_out_bandwidth_gb_s}) must be "
                f"nics_per_node x {out.id} line rate / gpus_per_node "
                f"({system.nics_per_node} x {out.line_rate_gb_s} / {system.gpus_per_node} = "
                f"{expected:g})"
            )
    for accelerator in catalog.accelerators.values():
        where = f"hardware catalog file {accelerator.id}.json"
        system_id = accelerator.default_system
        default = catalog.systems.get(system_id or "")
        if default is None:
            raise CatalogDataError(f"{where}: default_system names unknown system {system_id!r}")
        if default.accelerator != accelerator.id:
            raise CatalogDataError(
                f"{where}: default_system {system_id!r} holds {default.accelerator!r}, "
                f"not {accelerator.id!r}"
            )


def load_catalog(root: Traversable) -> Catalog:
    """Read the `accelerators/`, `systems/` and `fabrics/` folders under `root` (uncached) and
    check the references between them.

    Raises:
        CatalogDataError: any per-folder error (see `load_accelerators`, `load_systems`,
            `load_fabrics`), a system naming an unknown accelerator or fabric (or a fabric
            of the wrong kind), a peer rate on a switched fabric or none on a mesh, a NIC
            rate that is not nics x port rate / GPUs, or an accelerator whose default system
            is unknown or holds another accelerator.
    """
    catalog = Catalog(
        accelerators={a.id: a for a in load_accelerators(root / "accelerators")},
        systems={s.id: s for s in load_systems(root / "systems")},
        fabrics={f.id: f for f in load_fabrics(root / "fabrics")},
    )
    _check_references(catalog)
    return catalog


# ---- the shipped catalog and lookups -------------------------------------------------------


@functools.cache
def _catalog() -> Catalog:
    return load_catalog(_data_dir())


@functools.cache
def _index(kind: str) -> _Index:
    catalog = _catalog()
    by_id: dict[str, BaseModel] = dict(getattr(catalog, kind))
    specs = list(getattr(catalog, kind).values())
    return _Index(by_id=by_id, names=_build_index(specs))


def load_shipped() -> None:
    """Read the shipped catalog and build its name indexes now. The lookups cache them on
    first use; a service calls this before it answers, so that concurrent first requests do
    not each read the catalog (`functools.cache` does not hold other callers back while the
    first one fills it: 16 clients made 16 loads of about 0.1 s each)."""
    for kind in ("accelerators", "systems", "fabrics"):
        _index(kind)


def list_accelerators() -> list[AcceleratorSpec]:
    """Every accelerator in the shipped catalog, sorted by id (loaded once, then cached)."""
    return list(_catalog().accelerators.values())


def list_systems() -> list[SystemSpec]:
    """Every system in the shipped catalog, sorted by id (loaded once, then cached)."""
    return list(_catalog().systems.values())


def list_fabrics() -> list[FabricSpec]:
    """Every fabric in the shipped catalog, sorted by id (loaded once, then cached)."""
    return list(_catalog().fabrics.values())


def _suggestions(name: str, index: _Index) -> list[str]:
    key = normalize_accelerator_name(name)
    if not key or len(key) > _MAX_SUGGEST_LEN:
        return []
    ids: list[str] = []
    for match in difflib.get_close_matches(key, list(index.names), n=10, cutoff=0.6):
        entry_id = index.names[match]
        if entry_id not in ids:
            ids.append(entry_id)
    return ids[:_NUM_SUGGESTIONS]


_KINDS = {
    "accelerators": ("accelerator", "list_accelerators() / GET /v1/hardware"),
    "systems": ("system", "list_systems() / GET /v1/systems"),
    "fabrics": ("fabric", "list_fabrics() / GET /v1/fabrics"),
}


def _lookup(name: str, kind: str) -> BaseModel:
    index = _index(kind)
    entry_id = index.names.get(normalize_accelerator_name(name))
    if entry_id is not None:
        return index.by_id[entry_id]
    noun, lister = _KINDS[kind]
    suggestions = _suggestions(name, index)
    shown = name if len(name) <= _MAX_SUGGEST_LEN else name[:_MAX_SUGGEST_LEN] + "..."
    hint = (
        f"close matches: {', '.join(suggestions)}"
        if suggestions
        else f"no close match; {lister} lists every id"
    )
    raise CatalogLookupError(
        f"unknown {noun} {shown!r} ({hint})", value=shown, suggestions=suggestions
    )


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
    spec = _lookup(name, "accelerators")
    assert isinstance(spec, AcceleratorSpec)
    return spec


def get_system(name: str) -> SystemSpec:
    """Look a system up by id or alias (`"dgx-h100"`, `"HGX H100"`), like `get_accelerator`.

    Raises:
        CatalogLookupError: (404) unknown; the detail names the value and close matches.
    """
    spec = _lookup(name, "systems")
    assert isinstance(spec, SystemSpec)
    return spec


def get_fabric(name: str) -> FabricSpec:
    """Look a fabric up by id or alias (`"nvlink4-nvswitch"`, `"IB NDR"`), like
    `get_accelerator`.

    Raises:
        CatalogLookupError: (404) unknown; the detail names the value and close matches.
    """
    spec = _lookup(name, "fabrics")
    assert isinstance(spec, FabricSpec)
    return spec


# ---- resolution ----------------------------------------------------------------------------


def _named(given: str, resolved: str) -> str:
    """`'h100'` or, when an alias resolved to another id, `'h100' ('h100-sxm')`."""
    return repr(given) if given == resolved else f"{given!r} ({resolved!r})"


def _unknown(field: str, noun: str, value: str, exc: CatalogLookupError) -> SpecError:
    rule = f"must be a known {noun} id or alias"
    suggestions = exc.extensions.get("suggestions") or []
    hint = f"; close matches: {', '.join(suggestions)}" if suggestions else ""
    return SpecError(
        field=field, rule=rule, value=value, message=f"{field} {rule} (got {value!r}){hint}"
    )


def _measured_within(cluster: ClusterSpec, nodes: list[str] | None) -> float | None:
    """The slowest measured link between two nodes of one group (GB/s per node); None when
    none is measured."""
    if not nodes or not cluster.measured_links:
        return None
    members = set(nodes)
    rates = [
        link.gb_s for link in cluster.measured_links if link.src in members and link.dst in members
    ]
    return min(rates) if rates else None


def _measured_between(
    cluster: ClusterSpec, resolved_of: dict[int, ResolvedNodeGroup]
) -> float | None:
    """The per-GPU line rate between groups of different hardware that their slowest
    measured link implies (the sending node's GPUs share it, at the lower scale-out
    efficiency of the two); None when no such link is measured."""
    if not cluster.measured_links:
        return None
    owner = {node: i for i, spec in enumerate(cluster.node_groups) for node in spec.node_ids or []}
    rates = []
    for link in cluster.measured_links:
        a, b = resolved_of[owner[link.src]], resolved_of[owner[link.dst]]
        if same_hardware(a, b):
            continue
        efficiency = min(a.accelerator.scale_out_efficiency, b.accelerator.scale_out_efficiency)
        rates.append(link.gb_s / a.gpus_per_node / efficiency)
    return min(rates) if rates else None


def _default_name(accelerator_id: str, used: set[str]) -> str:
    """A name for a group without one: its accelerator id, numbered (`h100-sxm-2`, …) past
    the names already used; the name is added to `used`."""
    n = 1
    while (name := accelerator_id if n == 1 else f"{accelerator_id}-{n}") in used:
        n += 1
    used.add(name)
    return name


def resolve_cluster(cluster: ClusterSpec) -> ResolvedCluster:
    """Look up each node group's accelerator and system and fill the catalog defaults.

    Per group: the system is the named one, else the accelerator's `default_system` (a named
    system alone also gives the accelerator). A null `gpus_per_node` takes the named
    system's node size, else the accelerator's usual node size (accelerator-only groups keep
    their old meaning: `gb200` nodes are 72-GPU racks). A null `scale_up_domain_gpus` takes
    the system's domain when that spans several nodes and the group uses the system's node
    size (GB200 trays of 4 -> 72), else the node. Null bandwidths take the system's line
    rates (GB/s per GPU per direction); explicit values are kept as given. The cluster's
    scale-out layout is the request's `fabric` values over the first group's system's usual
    layout, whose nodes_per_leaf is converted to the group's node size (same GPUs per leaf).

    Raises:
        SpecError: (422) a group names an unknown accelerator
            (`cluster.node_groups.<i>.accelerator`) or system (`...system`), a system whose
            accelerator is not the group's accelerator (`...system`), a scale-up domain that
            is neither a multiple nor a divisor of the node (`...scale_up_domain_gpus`), or
            the resolved cluster has more than `MAX_TOTAL_GPUS` GPUs (`cluster.node_groups`).
    """
    catalog = _catalog()
    groups: list[ResolvedNodeGroup] = []
    used_names = {g.name for g in cluster.node_groups if g.name is not None}
    resolved_of: dict[int, ResolvedNodeGroup] = {}
    for i, group in enumerate(cluster.node_groups):
        prefix = f"cluster.node_groups.{i}"
        accelerator: AcceleratorSpec | None = None
        if group.accelerator is not None:
            try:
                accelerator = get_accelerator(group.accelerator)
            except CatalogLookupError as exc:
                raise _unknown(
                    f"{prefix}.accelerator", "accelerator", group.accelerator, exc
                ) from exc
        if group.system is not None:
            try:
                system = get_system(group.system)
            except CatalogLookupError as exc:
                raise _unknown(f"{prefix}.system", "system", group.system, exc) from exc
            holds = catalog.accelerators[system.accelerator]
            if accelerator is not None and accelerator.id != holds.id:
                field = f"{prefix}.system"
                rule = "must hold the group's accelerator"
                raise SpecError(
                    field=field,
                    rule=rule,
                    value=group.system,
                    message=(
                        f"{field} {rule}: {system.id!r} holds {holds.id!r}, but "
                        f"{prefix}.accelerator is {_named(str(group.accelerator), accelerator.id)} "
                        f"(got {group.system!r})"
                    ),
                )
            accelerator = holds
            node_default = system.gpus_per_node
        else:
            assert accelerator is not None  # NodeGroupSpec requires one of the two
            assert accelerator.default_system is not None  # the loader requires it
            system = catalog.systems[accelerator.default_system]
            node_default = accelerator.gpus_per_node
        gpus_per_node = group.gpus_per_node if group.gpus_per_node is not None else node_default
        domain = (
            group.scale_up_domain_gpus
            if group.scale_up_domain_gpus is not None
            else default_scale_up_domain(system, gpus_per_node)
        )
        if domain % gpus_per_node and gpus_per_node % domain:
            field = f"{prefix}.scale_up_domain_gpus"
            rule = f"must be a multiple of gpus_per_node ({gpus_per_node}) or divide it"
            raise SpecError(field=field, rule=rule, value=domain)
        intra = (
            group.intra_node_bandwidth_gb_s
            if group.intra_node_bandwidth_gb_s is not None
            else system.scale_up_bandwidth_gb_s
        )
        name = group.name or _default_name(accelerator.id, used_names)
        lost_nodes, lost_gpus = divmod(group.unavailable_gpus, gpus_per_node)
        full_nodes = group.num_nodes - lost_nodes - (1 if lost_gpus else 0)
        if full_nodes < 0 or (full_nodes == 0 and not lost_gpus):
            total = group.num_nodes * gpus_per_node
            raise SpecError(
                field=f"{prefix}.unavailable_gpus",
                rule=f"must leave at least one of the group's {total} GPUs",
                value=group.unavailable_gpus,
            )
        node_group = ResolvedNodeGroup(
            accelerator=accelerator,
            num_nodes=max(full_nodes, 1),
            gpus_per_node=gpus_per_node,
            name=name,
            price_per_gpu_hour=group.price_per_gpu_hour,
            intra_node_bandwidth_gb_s=intra,
            inter_node_bandwidth_gb_s=(
                group.inter_node_bandwidth_gb_s
                if group.inter_node_bandwidth_gb_s is not None
                else system.scale_out_bandwidth_gb_s
            ),
            system=system,
            scale_up_domain_gpus=domain,
            scale_up_fabric=catalog.fabrics[system.scale_up_fabric],
            scale_out_fabric=catalog.fabrics[system.scale_out_fabric],
            scale_up_peer_bandwidth_gb_s=capped_peer_bandwidth(system, intra),
        )
        measured = _measured_within(cluster, group.node_ids)
        if measured is not None:
            rate = measured / gpus_per_node / accelerator.scale_out_efficiency
            node_group = node_group.model_copy(update={"inter_node_bandwidth_gb_s": rate})
        resolved_of[i] = node_group
        if full_nodes > 0:
            groups.append(node_group)
        if lost_gpus:
            left = gpus_per_node - lost_gpus
            partial = f"{name}-partial"
            while partial in used_names:
                partial += "-"
            used_names.add(partial)
            groups.append(
                node_group.model_copy(
                    update={
                        "num_nodes": 1,
                        "gpus_per_node": left,
                        "name": partial,
                        "scale_up_domain_gpus": left,
                    }
                )
            )
    usual = usual_layout(groups[0].system, groups[0].gpus_per_node)
    requested = cluster.fabric
    layout = (
        usual
        if requested is None
        else FabricLayout(
            topology=requested.topology if requested.topology is not None else usual.topology,
            oversubscription=(
                requested.oversubscription
                if requested.oversubscription is not None
                else usual.oversubscription
            ),
            nodes_per_leaf=(
                requested.nodes_per_leaf
                if requested.nodes_per_leaf is not None
                else usual.nodes_per_leaf
            ),
        )
    )
    between = cluster.inter_group_bandwidth_gb_s
    if between is None:
        between = _measured_between(cluster, resolved_of)
    resolved = ResolvedCluster(groups=groups, fabric=layout, inter_group_bandwidth_gb_s=between)
    # ClusterSpec checks the total with 8 GPUs per node when gpus_per_node is null; the
    # catalog default can be larger (GB200: 72), so check again with the resolved sizes.
    if resolved.num_gpus > MAX_TOTAL_GPUS:
        raise SpecError(
            field="cluster.node_groups",
            rule=f"must hold at most {MAX_TOTAL_GPUS} GPUs in total",
            value=resolved.num_gpus,
        )
    return resolved
