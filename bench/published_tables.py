"""What the published-figure comparisons share: loading a file carried under `bench/data`,
checking its provenance (every source names where its figures were read and what it leaves
unstated, every table its source and locator, and the settings taken for what the sources
leave out are written down under `assumptions`), and the cluster a row's GPUs form."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hardware_catalog import resolve_cluster
from hardware_catalog.schema import ResolvedCluster
from specs import ClusterSpec

SOURCE_FIELDS = ("paper", "url", "transcription", "hardware", "runtime", "not_stated")
"""What every source of a published-figures file states."""


@dataclass(frozen=True)
class PublishedFile:
    """One published-figures file and what its tables and assumptions must state."""

    path: Path
    what: str
    table_fields: tuple[str, ...]
    assumption_fields: tuple[str, ...]

    def load(self) -> dict[str, Any]:
        return load_json(self.path, self.what)

    def gaps(self, data: dict[str, Any]) -> list[str]:
        return provenance_gaps(data, self.table_fields, self.assumption_fields)


def load_json(path: Path, what: str) -> dict[str, Any]:
    """The file at `path`; a missing file is an error, never an empty comparison."""
    if not path.is_file():
        raise FileNotFoundError(f"the {what} {path} are missing from the repository")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def provenance_gaps(
    data: dict[str, Any], table_fields: Sequence[str], assumption_fields: Sequence[str]
) -> list[str]:
    """Every provenance field a source, a table or the assumptions lack (empty: complete)."""
    gaps: list[str] = []
    for key, src in data["sources"].items():
        gaps += [f"sources.{key}.{f}" for f in SOURCE_FIELDS if not src.get(f)]
    for t in data["tables"]:
        gaps += [f"tables.{t.get('id')}.{f}" for f in table_fields if not t.get(f)]
        if t.get("source") not in data["sources"]:
            gaps.append(f"tables.{t.get('id')}.source (unknown source {t.get('source')!r})")
    assumptions = data.get("assumptions", {})
    gaps += [f"assumptions.{f}" for f in assumption_fields if f not in assumptions]
    return gaps


def cluster_of(accelerator: str, gpus: int) -> ResolvedCluster:
    """`gpus` GPUs of the catalog's `accelerator` in nodes of 8 (one node below 8), with the
    catalog's default system and fabric."""
    nodes, per_node = (gpus // 8, 8) if gpus >= 8 else (1, gpus)
    group = {"accelerator": accelerator, "num_nodes": nodes, "gpus_per_node": per_node}
    return resolve_cluster(ClusterSpec.model_validate({"node_groups": [group]}))
