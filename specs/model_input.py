"""The `model` member of API requests: a preset name, a Hugging Face config or an explicit spec.

`resolve_model` turns any of the three forms into the explicit `ModelSpec` every later layer
uses, and turns every kind of bad input into a domain error (never a raw pydantic or key error):

- `{"preset": "llama3-70b"}`  → `specs.presets.get_preset` (unknown name: `CatalogLookupError`
  with status 422, since the request body, not the URL, names it)
- `{"hf_config": {...}}`      → `specs.hf_import.model_from_hf_config`
- `{"num_layers": ..., ...}`  → `ModelSpec.model_validate` (errors: `SpecError` with fields
  prefixed `model.`)
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, PlainValidator, ValidationError

from specs._base import Spec
from specs.errors import CatalogLookupError, SpecError
from specs.hf_import import model_from_hf_config
from specs.model import ModelSpec
from specs.presets import get_preset

_FORMS_RULE = (
    'must be exactly one of {"preset": name}, {"hf_config": {...}} or an explicit model spec'
)


class PresetModelInput(Spec):
    """A built-in model preset by name."""

    preset: str = Field(min_length=1, max_length=200, examples=["llama3-70b"])
    """Preset name or alias, case-insensitive (`GET /v1/model-presets` lists them)."""


class HFConfigModelInput(Spec):
    """A Hugging Face `config.json`, read as the model it describes."""

    hf_config: dict[str, Any] = Field(
        examples=[
            {
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 32,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "intermediate_size": 14336,
                "vocab_size": 128256,
                "rope_theta": 500000.0,
                "max_position_embeddings": 8192,
                "rms_norm_eps": 1e-05,
                "tie_word_embeddings": False,
            }
        ]
    )
    """The config's JSON object as published with the checkpoint (Llama, Mistral, Mixtral,
    Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, DeepSeek-V2/V3 architectures)."""


def _model_input(value: Any) -> Any:
    """Request-time check of a model input: a JSON object. Which form it is and whether it
    is valid is `resolve_model`'s job, so that every error names its `model.` field."""
    if isinstance(value, ModelSpec):
        return value.model_dump(mode="json")
    if not isinstance(value, dict):
        raise ValueError(_FORMS_RULE)
    return value


ModelInput = Annotated[
    dict[str, Any],
    PlainValidator(
        _model_input,
        json_schema_input_type=PresetModelInput | HFConfigModelInput | ModelSpec,
    ),
    Field(
        description=(
            'One of: {"preset": name} (GET /v1/model-presets), {"hf_config": <config.json>} '
            "(Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, DeepSeek-V2/V3), "
            "or an explicit model spec."
        ),
        examples=[
            {"preset": "llama3-70b"},
            {
                "name": "my-70b",
                "num_layers": 80,
                "hidden_size": 8192,
                "num_attention_heads": 64,
                "num_kv_heads": 8,
                "ffn_hidden_size": 28672,
                "vocab_size": 128256,
                "gated_mlp": True,
                "tie_embeddings": False,
                "moe": None,
            },
        ],
    ),
]
"""The request type of a model input: documented as the union of its three forms (the
OpenAPI document shows each with its fields), held as the JSON object it was sent as, and
validated with `resolve_model`."""


def _spec_error_from_validation(exc: ValidationError) -> SpecError:
    """Every pydantic error as a `{field, rule, value, message}` entry, fields under `model.`."""
    entries: list[dict[str, Any]] = []
    for err in exc.errors():
        field = ".".join(["model", *(str(part) for part in err["loc"])])
        rule = str(err["msg"]).removeprefix("Value error, ")
        value = err.get("input")
        if isinstance(value, dict):  # model-level rules: the whole object is noise
            value = None
        entries.append(
            {"field": field, "rule": rule, "value": value, "message": f"{field}: {rule}"}
        )
    first = entries[0]
    error = SpecError(first["field"], first["rule"], first["value"], message=first["message"])
    error.extensions["errors"] = entries
    return error


def resolve_model(value: Any) -> ModelSpec:
    """The explicit ModelSpec for a model input.

    Args:
        value: `{"preset": name}`, `{"hf_config": {...}}` or the explicit spec fields.

    Returns:
        The validated ModelSpec.

    Raises:
        SpecError: not an object, more than one form, a wrongly typed member, an invalid
            explicit spec (pydantic errors, fields prefixed `model.`) or an invalid hf_config.
        CatalogLookupError: an unknown preset (status 422, `close_matches` in extensions).
        UnsupportedModelError: an hf_config of an unsupported architecture.
    """
    if isinstance(value, ModelSpec):
        return value
    if not isinstance(value, dict):
        raise SpecError("model", _FORMS_RULE, type(value).__name__)
    forms = [key for key in ("preset", "hf_config") if key in value]
    if forms and len(value) != 1:
        extra = sorted(str(k) for k in value)
        raise SpecError("model", f"{_FORMS_RULE}; found keys {extra}", extra)
    if forms == ["preset"]:
        name = value["preset"]
        if not isinstance(name, str) or not name.strip():
            raise SpecError("model.preset", "must be a non-empty preset name", name)
        try:
            return get_preset(name)
        except CatalogLookupError as exc:
            exc.status = 422  # named in the request body: invalid input, not a missing resource
            exc.extensions.setdefault(
                "errors",
                [
                    {
                        "field": "model.preset",
                        "rule": "unknown preset",
                        "value": name,
                        "message": exc.detail,
                    },
                ],
            )
            raise
    if forms == ["hf_config"]:
        config = value["hf_config"]
        if not isinstance(config, dict):
            raise SpecError(
                "model.hf_config", "must be a JSON object (a config.json)", type(config).__name__
            )
        return model_from_hf_config(config)
    try:
        return ModelSpec.model_validate(value)
    except ValidationError as exc:
        raise _spec_error_from_validation(exc) from exc
