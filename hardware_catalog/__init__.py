"""Hardware catalog: accelerator specs as data files with sources, looked up by id or alias,
and the resolution of a `ClusterSpec` into the `ResolvedCluster` the cost models read."""

from hardware_catalog.loader import (
    PRECISIONS,
    CatalogDataError,
    get_accelerator,
    list_accelerators,
    load_accelerators,
    normalize_accelerator_name,
    resolve_cluster,
)
from hardware_catalog.schema import AcceleratorSpec, ResolvedCluster, ResolvedNodeGroup, Source

__all__ = [
    "PRECISIONS",
    "AcceleratorSpec",
    "CatalogDataError",
    "ResolvedCluster",
    "ResolvedNodeGroup",
    "Source",
    "get_accelerator",
    "list_accelerators",
    "load_accelerators",
    "normalize_accelerator_name",
    "resolve_cluster",
]
