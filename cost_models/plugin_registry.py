"""Named plug-in classes: a class registers under a lower_snake name, has a nested pydantic
`Config` (extra fields forbidden) and takes one `Config` instance in its constructor; `build`
validates a request's config and instantiates. The training (`cost_models.registry`) and
serving (`cost_models.serving.registry`) cost models each keep one registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from specs.errors import PluginNotFound, SpecError

C = TypeVar("C", bound=type[Any])


class PluginRegistry:
    """The classes of one kind of plug-in (`kind` names it in messages)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.classes: dict[str, type[Any]] = {}

    def register(self, name: str) -> Callable[[C], C]:
        """Class decorator registering under `name`. Raises ValueError on a duplicate or
        malformed name, or a class without a nested pydantic `Config`."""
        if not name or not name.replace("_", "").isalnum() or name.lower() != name:
            raise ValueError(f"{self.kind} name must be lower_snake (got {name!r})")

        def decorator(cls: C) -> C:
            if name in self.classes:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered ({self.classes[name]!r})"
                )
            config = getattr(cls, "Config", None)
            if not (isinstance(config, type) and issubclass(config, BaseModel)):
                raise ValueError(f"{self.kind} {name!r} needs a nested pydantic Config class")
            self.classes[name] = cls
            return cls

        return decorator

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self.classes)

    def build(
        self, name: str, config: dict[str, Any] | None, field: str = "cost_model.config"
    ) -> Any:
        """An instance of `name` with its validated `config`.

        Raises:
            PluginNotFound: unknown name (the message lists the registered ones).
            SpecError: the config does not validate (field `<field>.<option>`).
        """
        cls = self.classes.get(name)
        if cls is None:
            known = ", ".join(self.names()) or "none"
            raise PluginNotFound(f"unknown {self.kind} {name!r}; registered: {known}", name=name)
        if config is not None and not isinstance(config, dict):
            raise SpecError(field, "must be an object", config)
        try:
            validated = cls.Config.model_validate(config or {})
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(part) for part in first["loc"])
            where = f"{field}.{loc}" if loc else field
            rule = first["msg"]
            if first["type"] == "extra_forbidden":
                rule += f"; {self.kind} {name!r} takes {sorted(cls.Config.model_fields)}"
            raise SpecError(where, rule, first.get("input"), f"{where}: {rule}") from exc
        return cls(validated)
