"""Built-in model presets: one JSON data file per model under `specs/data/models/`.

Each file holds the explicit `ModelSpec` fields, an optional `aliases` list and a `published`
block `{"num_parameters", "num_active_parameters"?, "source", "active_excludes_input_embedding"?}`
quoting the parameter count the model's authors published, so tests can check our counting
against it, and an `architecture_source` string naming where the architecture fields that
carry no parameters (rope_theta, rope_scaling, norm_epsilon, sliding_window,
max_position_embeddings) come from, usually the model's published Hugging Face `config.json`. Files are read and validated once (cached); lookups are case-insensitive.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specs.errors import CatalogLookupError
from specs.model import ModelSpec

PRESETS_DIR = Path(__file__).parent / "data" / "models"
"""Directory of the preset data files (`<name>.json`)."""

_META_KEYS = ("published", "aliases", "architecture_source")
"""Keys of a preset file that are not ModelSpec fields."""


class _Preset:
    """A loaded preset: the validated spec, its published counts and aliases."""

    __slots__ = ("aliases", "architecture_source", "published", "spec")

    def __init__(
        self,
        spec: ModelSpec,
        published: dict[str, Any],
        aliases: list[str],
        architecture_source: str | None = None,
    ) -> None:
        self.spec = spec
        self.published = published
        self.aliases = aliases
        self.architecture_source = architecture_source


def _load_file(path: Path) -> _Preset:
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise ValueError(f"preset file {path.name} must hold a JSON object")
    published = raw.pop("published", None)
    aliases = raw.pop("aliases", [])
    architecture_source = raw.pop("architecture_source", None)
    if architecture_source is not None and not (
        isinstance(architecture_source, str) and architecture_source.strip()
    ):
        raise ValueError(f"preset file {path.name}: architecture_source must be a non-empty string")
    if (
        not isinstance(published, dict)
        or "num_parameters" not in published
        or "source" not in published
    ):
        raise ValueError(
            f"preset file {path.name} needs a published block with num_parameters and source"
        )
    try:
        spec = ModelSpec.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(f"preset file {path.name} is not a valid ModelSpec: {exc}") from exc
    if spec.name != path.stem:
        raise ValueError(
            f"preset file {path.name} names the model {spec.name!r}; expected {path.stem!r}"
        )
    if spec.is_moe and "num_active_parameters" not in published:
        raise ValueError(f"preset file {path.name} is MoE: published needs num_active_parameters")
    return _Preset(spec, dict(published), [str(a) for a in aliases], architecture_source)


@lru_cache(maxsize=1)
def _load_all() -> tuple[dict[str, _Preset], dict[str, str]]:
    """All presets by lower-case name, and every lower-case alias mapped to its preset name."""
    presets: dict[str, _Preset] = {}
    index: dict[str, str] = {}
    for path in sorted(PRESETS_DIR.glob("*.json")):
        preset = _load_file(path)
        name = preset.spec.name.lower()
        presets[name] = preset
        for key in (name, *(a.lower() for a in preset.aliases)):
            if key in index:
                raise ValueError(f"preset name or alias {key!r} is defined twice")
            index[key] = name
    return presets, index


def list_presets() -> list[str]:
    """Names of the built-in presets, sorted."""
    return sorted(_load_all()[0])


def _lookup(name: str) -> _Preset:
    presets, index = _load_all()
    key = name.strip().lower() if isinstance(name, str) else ""
    if key in index:
        return presets[index[key]]
    close = difflib.get_close_matches(key, list(index), n=3, cutoff=0.5)
    close_names = sorted({index[c] for c in close})
    hint = f"; did you mean {', '.join(close_names)}?" if close_names else ""
    raise CatalogLookupError(
        f"unknown model preset {name!r}{hint} (GET /v1/model-presets lists them)",
        name=name,
        close_matches=close_names,
        available=sorted(presets),
    )


def get_preset(name: str) -> ModelSpec:
    """The preset's ModelSpec (case-insensitive name or alias).

    Raises:
        CatalogLookupError: unknown name; `extensions["close_matches"]` lists near names.
    """
    return _lookup(name).spec


def preset_info(name: str) -> dict[str, Any]:
    """The explicit spec fields plus `num_parameters` (and `num_active_parameters` for MoE),
    the `published` block with its source and the `architecture_source`."""
    preset = _lookup(name)
    spec = preset.spec
    info: dict[str, Any] = spec.model_dump(mode="json")
    info["num_parameters"] = spec.num_parameters()
    if spec.is_moe:
        info["num_active_parameters"] = spec.num_active_parameters()
    info["published"] = dict(preset.published)
    if preset.architecture_source is not None:
        info["architecture_source"] = preset.architecture_source
    if preset.aliases:
        info["aliases"] = list(preset.aliases)
    return info
