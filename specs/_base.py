"""Shared pydantic configuration for the domain specs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """Frozen, strict base for every domain spec: unknown fields are rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
