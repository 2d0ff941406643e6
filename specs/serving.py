"""Serving specs (issue 5): the serving workload, a serving plan and its metrics.

A serving workload describes a request stream (prompt and output length distributions, or a
trace), latency SLOs and the weight / KV-cache formats; a serving plan says how engine
instances are laid out (colocated, or prefill/decode disaggregated as in DistServe, Zhong
et al., OSDI'24) and `ServingMetrics` is what a plan achieves.

Length distributions (`LengthSpec`): a fixed integer, summary statistics `{mean, p50?, p90?}`
fitted with a lognormal, or `{samples: [...]}` resampled with replacement. Request lengths
of LLM services are right-skewed and close to lognormal (e.g. the Azure LLM inference traces
of Splitwise, Patel et al., ISCA'24, Fig. 3), which motivates the fit. The fit, with z90 =
Φ⁻¹(0.9) ≈ 1.2816 and X = exp(μ + σ·Z):

- mean only: no spread is given and none is assumed: every request has round(mean) tokens;
- mean and p50: μ = ln p50, and E[X] = exp(μ + σ²/2) gives σ = sqrt(2·ln(mean / p50))
  (needs mean ≥ p50, as for every lognormal);
- mean and p90: μ + σ²/2 = ln mean and μ + z90·σ = ln p90 give σ²/2 − z90·σ + ln(p90/mean)
  = 0; σ is the smaller positive root z90 − sqrt(z90² − 2·ln(p90/mean)) when p90 > mean
  (the larger one otherwise); no lognormal exists when ln(p90/mean) > z90²/2;
- p50 and p90 (mean also given): μ = ln p50, σ = ln(p90/p50) / z90; the two quantiles fix
  the shape and the mean must be at least p50.

Samples are rounded to integers and clipped to [1, MAX_TOKENS].
"""

from __future__ import annotations

import json
import math
import random
import statistics
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from specs._base import Spec
from specs.errors import SpecError

MAX_TOKENS = 131_072
"""Largest prompt or output length accepted (128 Ki tokens, Llama-3.1's context window)."""
MAX_LIST_ROWS = 20_000
"""Longest trace or sample list accepted."""
Z90 = statistics.NormalDist().inv_cdf(0.9)
"""Φ⁻¹(0.9) ≈ 1.2816, the standard normal 90th percentile."""

WeightFormat = Literal["bf16", "fp16", "fp8", "int4"]
"""Weight format: bf16/fp16 (2 B/param), fp8 (W8A8, fp8 GEMMs; 1 B/param), int4 (W4A16:
0.5 B/param, GEMMs computed in bf16)."""
KVPrecision = Literal["bf16", "fp16", "fp8"]
"""KV-cache element format (2 or 1 bytes)."""
ServingObjective = Literal["max_goodput_per_gpu", "min_gpus", "min_latency", "min_cost"]
InstanceRole = Literal["both", "prefill", "decode"]


def _integer_or_object(schema: dict[str, Any]) -> None:
    """The JSON schema of a LengthSpec says what it accepts: a bare integer (the `_from_int`
    validator turns it into `fixed`) or the object form."""
    integer = {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS}
    obj = {k: v for k, v in schema.items() if k not in ("title", "description")}
    for key in obj:
        del schema[key]
    schema["anyOf"] = [integer, obj]


class LengthSpec(Spec):
    """A token-length distribution: fixed, summary statistics, or samples.

    Accepts a bare integer (fixed), `{"mean", "p50"?, "p90"?}` or `{"samples": [...]}`;
    dumps back to the same form.
    """

    fixed: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    """Every request has exactly this many tokens."""
    model_config = ConfigDict(
        **Spec.model_config, populate_by_name=True, json_schema_extra=_integer_or_object
    )

    mean_length: float | None = Field(default=None, ge=1, le=MAX_TOKENS, alias="mean")
    """Mean length in tokens, given as `mean`: alone, every request has round(mean) tokens;
    with p50 and / or p90, a lognormal is fitted to the statistics."""
    p50: float | None = Field(default=None, ge=1, le=MAX_TOKENS)
    """Median length, tokens."""
    p90: float | None = Field(default=None, ge=1, le=MAX_TOKENS)
    """90th-percentile length, tokens."""
    samples: list[int] | None = Field(default=None, min_length=1, max_length=MAX_LIST_ROWS)
    """Observed lengths in tokens, resampled with replacement."""
    percentiles: list[int] | None = Field(default=None, min_length=2, max_length=1001)
    """Lengths in tokens at evenly spaced quantiles from the minimum to the maximum (101 values: the
    0th, 1st, …, 100th percentile; a named `dataset` expands to 1001, one every 0.1 %),
    non-decreasing; sampled by inverse transform, linear between neighbours."""

    @model_validator(mode="before")
    @classmethod
    def _from_int(cls, data: Any) -> Any:
        if isinstance(data, bool):
            raise ValueError(f"a length must be an integer or an object (got {data!r})")
        if isinstance(data, int):
            return {"fixed": data}
        return data

    @model_validator(mode="after")
    def _check(self) -> LengthSpec:
        stats = self.mean_length is not None or self.p50 is not None or self.p90 is not None
        given = [
            name
            for name, value in (
                ("fixed", self.fixed),
                ("stats", stats),
                ("samples", self.samples),
                ("percentiles", self.percentiles),
            )
            if value
        ]
        if len(given) != 1:
            raise ValueError(
                "a length is an integer, {mean, p50?, p90?}, {samples: [...]} or "
                f"{{percentiles: [...]}}, exactly one of them (got {', '.join(given) or 'none'})"
            )
        for name, values in (("samples", self.samples), ("percentiles", self.percentiles)):
            bad = [x for x in values or [] if not 1 <= x <= MAX_TOKENS]
            if bad:
                raise ValueError(f"{name} must lie in [1, {MAX_TOKENS}] (got {bad[0]})")
        if self.percentiles is not None and any(
            b < a for a, b in zip(self.percentiles, self.percentiles[1:], strict=False)
        ):
            raise ValueError("percentiles must not decrease")
        if given == ["stats"]:
            if self.mean_length is None:
                raise ValueError("a length given by statistics needs its mean")
            self._fit()  # raises on statistics no lognormal has
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A fixed length dumps as the bare integer; otherwise only the fields given."""
        if self.fixed is not None:
            return self.fixed
        data = handler(self)
        if isinstance(data, dict):
            renamed = {("mean" if k == "mean_length" else k): v for k, v in data.items()}
            return {k: v for k, v in renamed.items() if v is not None}
        return data

    # ---- the distribution ---------------------------------------------------------------
    def _fit(self) -> tuple[float, float] | None:
        """(μ, σ) of the fitted lognormal; None for a constant (fixed, or mean alone)."""
        mean, p50, p90 = self.mean_length, self.p50, self.p90
        if mean is None or (p50 is None and p90 is None):
            return None
        if p50 is not None and mean < p50:
            raise ValueError(
                f"mean ({mean}) must be at least p50 ({p50}): a lognormal's mean exceeds its median"
            )
        if p50 is not None and p90 is not None:
            if p90 < p50:
                raise ValueError(f"p90 ({p90}) must be at least p50 ({p50})")
            return math.log(p50), math.log(p90 / p50) / Z90
        if p50 is not None:
            return math.log(p50), math.sqrt(2.0 * math.log(mean / p50))
        assert p90 is not None
        c = math.log(p90 / mean)
        disc = Z90 * Z90 - 2.0 * c
        if disc < 0:
            raise ValueError(
                f"p90 ({p90}) is too far above the mean ({mean}) for a lognormal "
                f"(p90 / mean must be at most {math.exp(Z90 * Z90 / 2):.3f})"
            )
        sigma = Z90 - math.sqrt(disc) if c > 0 else Z90 + math.sqrt(disc)
        return math.log(mean) - sigma * sigma / 2.0, sigma

    @staticmethod
    def _clip(x: float) -> int:
        return min(MAX_TOKENS, max(1, round(x)))

    def sample(self, rng: random.Random, n: int) -> list[int]:
        """n lengths drawn with `rng` (deterministic given its state)."""
        if self.fixed is not None:
            return [self.fixed] * n
        if self.samples is not None:
            return [self.samples[rng.randrange(len(self.samples))] for _ in range(n)]
        if self.percentiles is not None:
            return [self._clip(self._interpolate(rng.random())) for _ in range(n)]
        fit = self._fit()
        if fit is None:
            assert self.mean_length is not None
            return [self._clip(self.mean_length)] * n
        mu, sigma = fit
        return [self._clip(rng.lognormvariate(mu, sigma)) for _ in range(n)]

    def mean(self) -> float:
        """The distribution's mean (the stated mean for statistics, before clipping)."""
        if self.fixed is not None:
            return float(self.fixed)
        if self.samples is not None:
            return statistics.fmean(self.samples)
        if self.percentiles is not None:  # the piecewise-linear distribution's mean
            p = self.percentiles
            return statistics.fmean((a + b) / 2 for a, b in zip(p, p[1:], strict=False))
        assert self.mean_length is not None
        return float(self.mean_length)

    def _interpolate(self, q: float) -> float:
        """The percentiles' inverse CDF at q in [0, 1], linear between neighbours."""
        assert self.percentiles is not None
        p = self.percentiles
        x = q * (len(p) - 1)
        i = min(int(x), len(p) - 2)
        return p[i] + (x - i) * (p[i + 1] - p[i])

    def quantile(self, q: float) -> float:
        """The q-quantile (0 < q < 1): exact for fixed and fitted lengths, the nearest-rank
        empirical quantile of samples."""
        if not 0.0 < q < 1.0:
            raise ValueError(f"quantile q must be in (0, 1) (got {q})")
        if self.fixed is not None:
            return float(self.fixed)
        if self.samples is not None:
            ordered = sorted(self.samples)
            return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])
        if self.percentiles is not None:
            return self._interpolate(q)
        fit = self._fit()
        if fit is None:
            assert self.mean_length is not None
            return float(self._clip(self.mean_length))
        mu, sigma = fit
        x = math.exp(mu + sigma * statistics.NormalDist().inv_cdf(q))
        return float(min(MAX_TOKENS, max(1.0, x)))


LENGTH_DATASETS_FILE = Path(__file__).resolve().parent / "data" / "length_distributions.json"


@lru_cache(maxsize=1)
def length_datasets() -> dict[str, Any]:
    """The named request-length distributions (`workload.dataset`), by name."""
    datasets: dict[str, Any] = json.loads(LENGTH_DATASETS_FILE.read_text())["datasets"]
    return datasets


class ServingSLO(Spec):
    """Latency targets at a percentile of requests (DistServe's goodput definition)."""

    ttft_ms: float | None = Field(default=None, gt=0, le=3_600_000)
    """Time to first token target, ms."""
    tpot_ms: float | None = Field(default=None, gt=0, le=60_000)
    """Time per output token target (after the first), ms."""
    percentile: float = Field(default=90.0, ge=50.0, le=99.9)
    """Share of requests that must meet both targets, percent (50–99.9)."""


def _with_length_distribution(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its `length_distribution` spelled out as `dataset` or as the prompt and
    output lengths; a field it names that the request also gives differently is a clash."""
    given = data["length_distribution"]
    if isinstance(given, str):
        fields: dict[str, Any] = {"dataset": given}
    elif isinstance(given, dict):
        allowed = {"dataset", "prompt_tokens", "output_tokens"}
        extra = sorted(set(given) - allowed)
        if extra:
            raise ValueError(
                f"length_distribution takes {', '.join(sorted(allowed))}; not {', '.join(extra)}"
            )
        fields = dict(given)
    else:
        return data  # the field's type check names it
    clash = [k for k, v in fields.items() if data.get(k) is not None and data.get(k) != v]
    if clash:
        raise ValueError(f"length_distribution gives {', '.join(clash)} too: give one or the other")
    return {**data, **fields}


class ServingWorkload(Spec):
    """LLM inference under latency SLOs (`"kind": "serving"`)."""

    kind: Literal["serving"] = "serving"
    """Workload kind: `serving` (LLM inference under latency SLOs)."""
    prompt_tokens: LengthSpec | None = None
    """Prompt length in tokens: a fixed integer, `{mean, p50?, p90?}`, `{samples}` or
    `{percentiles}` (replaced by `trace` or `dataset`)."""
    output_tokens: LengthSpec | None = None
    """Output length in tokens, in the same forms as `prompt_tokens` (replaced by `trace`
    or `dataset`)."""
    trace: list[tuple[float, int, int]] | None = Field(
        default=None, min_length=1, max_length=MAX_LIST_ROWS
    )
    """Rows of (arrival offset in seconds, non-decreasing; prompt tokens; output tokens);
    replaces prompt_tokens, output_tokens and arrival_rate_rps."""
    arrival_rate_rps: float | None = Field(default=None, gt=0, le=1_000_000)
    """Poisson arrival rate, requests/s; null: the search maximises the rate (goodput)."""
    slo: ServingSLO = Field(default_factory=ServingSLO)
    """TTFT / TPOT targets at a percentile."""
    precision: WeightFormat = "bf16"
    """Weight format (int4 = W4A16, fp8 = W8A8 fp8 GEMMs)."""
    kv_cache_precision: KVPrecision | None = None
    """KV-cache format; null: fp8 for instances with fp8 weights, else bf16."""
    precision_options: list[WeightFormat] | None = Field(default=None, min_length=1, max_length=4)
    """Extra weight formats the search may try."""
    objective: ServingObjective = "max_goodput_per_gpu"
    """What the search optimises: `max_goodput_per_gpu`; `min_gpus` / `min_cost` (the
    fewest GPUs / the lowest price per hour, `cluster.node_groups[].price_per_gpu_hour`,
    that serve `arrival_rate_rps` under the SLO; on a cluster of mixed hardware, the mix of
    groups that does); `min_latency`."""
    num_requests: int = Field(default=600, ge=50, le=5000)
    """Requests simulated per evaluation (count)."""
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    """Seed of the request stream (lengths and arrivals)."""
    max_concurrency: int | None = Field(default=None, ge=1, le=100_000, strict=True)
    """At most this many requests in flight, as a benchmark client's `--max-concurrency`
    holds them: a request waits at the client for a free slot and its latencies count from
    when it is sent. Without `arrival_rate_rps` every request is ready at once: a closed
    loop of this many clients (`vllm bench serve --request-rate inf --max-concurrency N`).
    It shapes the latencies measured at the workload's rate; goodput stays open-loop."""
    shared_prefix_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS, strict=True)
    """Leading prompt tokens every request shares (a system prompt, few-shot examples):
    engines with prefix caching (`GET /v1/engines`: `prefix_caching`) compute them once per
    instance and keep their KV cache; the prompt lengths include them."""
    dataset: str | None = Field(default=None, min_length=1, max_length=64)
    """A named request-length distribution whose prompt and output lengths the requests
    take, with the skew of real traffic (`specs/data/length_distributions.json`, each with
    its source): `azure_conversation` (prompt p50 1020 / p90 2735, output 129 / 424 tokens),
    `azure_code` (1469 / 5194, 13 / 55), `arxiv_summarization` (2730 / 3702, 167 / 372),
    `openchat_sharegpt4` (ShareGPT conversations as Sarathi-Serve serves them, up to 8k
    tokens: 1730 / 5696, 415 / 834; vLLM's `benchmark_serving --dataset-name sharegpt` takes
    first turns only and is far shorter: give its lengths as `percentiles`).
    Replaces prompt_tokens and output_tokens."""
    length_distribution: str | dict[str, Any] | None = None
    """The request lengths in one field (the contract's name): a dataset name, as `dataset`,
    or its parameters `{"dataset"}` or `{"prompt_tokens", "output_tokens"}` (each a length
    as those fields take it)."""

    @model_validator(mode="before")
    @classmethod
    def _expand_dataset(cls, data: Any) -> Any:
        """A named dataset becomes the prompt and output percentiles it stands for;
        `length_distribution` the fields it names."""
        if isinstance(data, dict) and data.get("length_distribution") is not None:
            data = _with_length_distribution(data)
        if not isinstance(data, dict) or data.get("dataset") is None:
            return data
        name = data["dataset"]
        known = length_datasets()
        if not isinstance(name, str) or name not in known:
            return data  # the field validator names the field
        expanded = {
            side: {"percentiles": known[name][side.split("_")[0]]["percentiles"]}
            for side in ("prompt_tokens", "output_tokens")
        }
        clash = [
            k
            for k in ("prompt_tokens", "output_tokens", "trace")
            if data.get(k) is not None and data.get(k) != expanded.get(k)
        ]
        if clash:
            raise ValueError(f"dataset replaces {', '.join(clash)}: give one or the other")
        return {**data, **expanded}

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str | None) -> str | None:
        known = length_datasets()
        if value is not None and value not in known:
            raise ValueError(f"dataset must be one of {sorted(known)} (got {value!r})")
        return value

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A workload without a dataset dumps as before the field existed; one with a
        dataset dumps its name, not the percentiles it expands to."""
        data = handler(self)
        if isinstance(data, dict):
            if data.get("shared_prefix_tokens") == 0:
                data.pop("shared_prefix_tokens")
            if data.get("max_concurrency", 0) is None:
                data.pop("max_concurrency")
            if data.get("dataset") is None:
                data.pop("dataset", None)
            else:
                data.pop("prompt_tokens", None)
                data.pop("output_tokens", None)
        return data

    @model_validator(mode="after")
    def _check(self) -> ServingWorkload:
        if self.trace is not None:
            clash = [
                name
                for name in ("prompt_tokens", "output_tokens", "arrival_rate_rps")
                if getattr(self, name) is not None
            ]
            if clash:
                raise ValueError(f"trace replaces {', '.join(clash)}: give one or the other")
            last = 0.0
            for i, (arrival, prompt, output) in enumerate(self.trace):
                if not math.isfinite(arrival) or arrival < 0:
                    raise ValueError(
                        f"trace[{i}] arrival_s must be finite and >= 0 (got {arrival})"
                    )
                if arrival < last:
                    raise ValueError(
                        f"trace[{i}] arrival_s must not decrease (got {arrival} after {last})"
                    )
                last = arrival
                for name, value in (("prompt", prompt), ("output", output)):
                    if not 1 <= value <= MAX_TOKENS:
                        raise ValueError(
                            f"trace[{i}] {name} tokens must lie in [1, {MAX_TOKENS}] (got {value})"
                        )
        else:
            missing = [
                name for name in ("prompt_tokens", "output_tokens") if getattr(self, name) is None
            ]
            if missing:
                raise ValueError(f"{' and '.join(missing)} required (or give a trace)")
        if self.precision_options is not None and len(set(self.precision_options)) != len(
            self.precision_options
        ):
            raise ValueError(
                f"precision_options must not repeat a format (got {self.precision_options})"
            )
        if self.shared_prefix_tokens:
            prompts = (
                statistics.fmean(row[1] for row in self.trace)
                if self.trace is not None
                else self.prompt_tokens.mean()
                if self.prompt_tokens is not None
                else math.inf
            )
            if self.shared_prefix_tokens >= prompts:
                raise ValueError(
                    f"shared_prefix_tokens ({self.shared_prefix_tokens}) must be shorter than "
                    f"the mean prompt ({prompts:.0f} tokens): the prompts include the prefix"
                )
        return self

    def check_objective(self) -> None:
        """What a search needs for its `objective` (an estimate needs none: it prices the
        plan it is given and reports its latencies, SLO or not): `max_goodput_per_gpu`,
        `min_gpus` and `min_cost` rank by goodput, so they need an SLO; `min_gpus` and
        `min_cost` also need the rate to carry (`arrival_rate_rps`, or a trace). Raises
        SpecError naming the field."""
        if self.objective in ("max_goodput_per_gpu", "min_gpus", "min_cost") and (
            self.slo.ttft_ms is None and self.slo.tpot_ms is None
        ):
            raise SpecError(
                "workload.slo",
                "ttft_ms and/or tpot_ms for a search",
                self.slo.model_dump(mode="json"),
                f"objective {self.objective} needs an SLO: slo.ttft_ms and/or slo.tpot_ms",
            )
        if (
            self.objective in ("min_gpus", "min_cost")
            and self.arrival_rate_rps is None
            and self.trace is None
        ):
            raise SpecError(
                "workload.arrival_rate_rps",
                f"required for objective {self.objective} (or a trace)",
                None,
                f"objective {self.objective} needs arrival_rate_rps (or a trace)",
            )

    @property
    def kv_precision(self) -> KVPrecision:
        """The KV-cache format in force (fp8 with fp8 weights, else bf16, unless given)."""
        if self.kv_cache_precision is not None:
            return self.kv_cache_precision
        return "fp8" if self.precision == "fp8" else "bf16"

    @property
    def weight_formats(self) -> list[WeightFormat]:
        """`precision` followed by the other `precision_options`, without repeats."""
        out: list[WeightFormat] = [self.precision]
        out += [p for p in self.precision_options or [] if p != self.precision]
        return out


class ServingParallelism(Spec):
    """Parallel degrees of one engine instance: tensor × pipeline × expert GPUs.

    `expert` > 1 (MoE models only) adds attention data parallelism: `expert` attention
    replicas of `tensor` GPUs each, with the routed experts spread over all tensor × expert
    GPUs of a stage (vLLM's EP = TP × DP; SGLang's DP attention)."""

    tensor: int = Field(default=1, ge=1, le=1024)
    """Tensor-parallel degree: GPUs that split every layer's weights and GEMMs."""
    pipeline: int = Field(default=1, ge=1, le=1024)
    """Pipeline stages: the layers split over this many groups of GPUs."""
    expert: int = Field(default=1, ge=1, le=1024)
    """Attention data-parallel replicas per stage, with the routed experts spread over
    tensor × expert GPUs (MoE models only; 1 for dense models)."""

    @property
    def num_gpus(self) -> int:
        return self.tensor * self.pipeline * self.expert


class ServingInstance(Spec):
    """One kind of engine instance and how many replicas of it run."""

    role: InstanceRole = "both"
    """both (colocated), prefill or decode (disaggregated)."""
    count: int = Field(default=1, ge=1, le=100_000)
    """Replicas of this instance (count)."""
    parallelism: ServingParallelism = Field(default_factory=ServingParallelism)
    """Parallel degrees of one replica (tensor × pipeline × expert GPUs)."""
    max_batch_size: int = Field(default=256, ge=1, le=65_536)
    """Most sequences in one iteration (continuous batching)."""
    chunk_size: int | None = Field(default=None, ge=1, le=1_048_576)
    """Prefill token budget per iteration (chunked prefill); null: no chunking."""
    precision: WeightFormat | None = None
    """Weight format of this instance; null: the workload's precision."""
    group: str | None = Field(default=None, min_length=1, max_length=64)
    """On a cluster of mixed hardware: the node group (or pool of identical groups, by its
    first group's name) the instances run on. A colocated plan may then list one `both`
    instance per group: the router sends each request to the instance with the least
    outstanding work per unit of its speed."""
    stage_groups: list[str] | None = Field(default=None, min_length=1, max_length=1024)
    """On a cluster of mixed hardware: the node group (or pool, by any of its groups' names)
    of every pipeline stage, `parallelism.pipeline` of them: one instance whose stages run
    on different kinds of GPU, each stage `tensor × expert` GPUs of its group (Helix, Mei et
    al., ASPLOS'25; Parallax, Tong et al. 2025). Replaces `group`."""
    stage_layers: list[int] | None = Field(default=None, min_length=1, max_length=1024)
    """Layers of every stage of `stage_groups`, adding to the model's layers; null: the
    planner splits them in proportion to each stage's speed within its memory
    (`solver.serving.stages`)."""

    @property
    def num_gpus(self) -> int:
        return self.count * self.parallelism.num_gpus

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> Any:
        """An instance without a group or stage groups dumps as before the fields existed."""
        data = handler(self)
        if isinstance(data, dict):
            for key in ("group", "stage_groups", "stage_layers"):
                if data.get(key, 0) is None:
                    data.pop(key)
        return data


ENGINE_ALIASES: dict[str, str] = {
    "vllm_v1": "vllm",
    "v1": "vllm",
    "v0": "vllm_v0",
    "trtllm": "tensorrt_llm",
    "trt_llm": "tensorrt_llm",
    "tensorrtllm": "tensorrt_llm",
    "sgl": "sglang",
}
"""Names people write for the registered engines (after lower-casing, `-`/` ` → `_`)."""


def canonical_engine_name(value: Any) -> Any:
    """An engine name as the registry spells it: case, spaces and hyphens ignored
    (`TensorRT-LLM`, `vLLM V0`), common aliases mapped; any other string is kept (plug-in
    engines) and non-strings pass through for the validator to refuse."""
    if not isinstance(value, str):
        return value
    key = value.strip().lower().replace("-", "_").replace(" ", "_").replace(".", "_")
    return ENGINE_ALIASES.get(key, key if key else value)


class ServingPlan(Spec):
    """How the engine instances are laid out."""

    mode: Literal["colocated", "disaggregated"] = "colocated"
    """`colocated`: every instance runs both prefill and decode; `disaggregated`: prefill
    and decode instances apart, the KV cache sent from one to the other (DistServe)."""
    instances: list[ServingInstance] = Field(min_length=1, max_length=64)
    """One `both` instance (colocated), a `prefill` and a `decode` one (disaggregated), or on
    a cluster of mixed hardware one `both` instance per node group (colocated)."""
    engine: str | None = Field(default=None, min_length=1, max_length=64)
    """The serving engine the plan is priced for and launches with (`GET /v1/engines`:
    `vllm`, `vllm_v0`, `sglang`, `tensorrt_llm`): its scheduler (how prompts share
    iterations with decodes, multi-step scheduling) and its host (CPU) cost per iteration.
    Null: vLLM (V1). Plans the service returns always name it."""
    engine_options: dict[str, Any] = Field(default_factory=dict)
    """The engine's settings (`GET /v1/engines/{name}`: `options`), e.g.
    `{"num_scheduler_steps": 8}` for `vllm_v0` or `{"async_scheduling": true}` for `vllm`."""

    @field_validator("engine", mode="before")
    @classmethod
    def _canonical_engine(cls, value: Any) -> Any:
        return canonical_engine_name(value)

    @model_serializer(mode="wrap")
    def _omit_unset_engine(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A plan without an engine dumps exactly as before the field existed."""
        data = handler(self)
        if isinstance(data, dict):
            if data.get("engine", 0) is None:
                del data["engine"]
            if data.get("engine_options", 0) == {}:
                del data["engine_options"]
        return data

    @model_validator(mode="after")
    def _check(self) -> ServingPlan:
        roles = [i.role for i in self.instances]
        groups = [i.group for i in self.instances]
        across = len(roles) > 1 and set(roles) == {"both"}
        if across and (None in groups or len(set(groups)) != len(groups)):
            raise ValueError(
                "a colocated plan lists several 'both' instances only across node groups: "
                f"each names a different group (got groups {groups})"
            )
        if self.mode == "colocated" and roles != ["both"] and not across:
            raise ValueError(
                f"a colocated plan has exactly one instance with role 'both' (got roles {roles})"
            )
        if self.mode == "disaggregated" and sorted(roles) != ["decode", "prefill"]:
            raise ValueError(
                f"a disaggregated plan has one 'prefill' and one 'decode' instance "
                f"(got roles {roles})"
            )
        return self

    def instance(self, role: InstanceRole) -> ServingInstance:
        """The instance entry with `role` (KeyError if the plan has none)."""
        for inst in self.instances:
            if inst.role == role:
                return inst
        raise KeyError(role)

    @property
    def gpus_used(self) -> int:
        return sum(i.num_gpus for i in self.instances)


class ServingRestartRole(Spec):
    """What one instance of a re-planned serving plan keeps and restarts."""

    role: InstanceRole
    """The instance's role."""
    kept: int = Field(ge=0)
    """Replicas that keep running (count)."""
    restarted: int = Field(ge=0)
    """Replicas started anew (count)."""
    gpus_per_instance: int = Field(ge=1)
    """GPUs of one replica (count)."""
    weight_bytes_per_instance: float = Field(ge=0)
    """Weights one restarted replica loads: parameters × bytes per weight of its format
    (routed experts once, other weights once per attention replica), bytes."""
    weight_bytes_per_gpu: float = Field(ge=0)
    """Weights one GPU of a restarted replica loads (the replica's over its GPUs), bytes."""


class ServingMetrics(Spec):
    """What a serving plan achieves (latencies at `arrival_rate_rps`)."""

    ttft_ms_p50: float = Field(ge=0)
    """Time to first token (arrival → first output token, queueing included), median over
    the simulated requests, ms (10^12 when the percentile falls on a request never
    served)."""
    ttft_ms_p90: float = Field(ge=0)
    """Time to first token, 90th percentile, ms."""
    ttft_ms_p99: float = Field(ge=0)
    """Time to first token, 99th percentile, ms."""
    tpot_ms_p50: float = Field(ge=0)
    """Time per output token after the first ((last token − first token) / (output tokens −
    1) of each request, 0 for a one-token output), median, ms."""
    tpot_ms_p90: float = Field(ge=0)
    """Time per output token, 90th percentile, ms."""
    tpot_ms_p99: float = Field(ge=0)
    """Time per output token, 99th percentile, ms."""
    e2e_latency_s_p50: float = Field(ge=0)
    """End-to-end latency (arrival → last token), median, seconds (at most 10^9)."""
    e2e_latency_s_p90: float = Field(ge=0)
    """End-to-end latency, 90th percentile, seconds (at most 10^9)."""
    throughput_tokens_per_s: float = Field(ge=0)
    """Output tokens of finished requests per second over the simulated stream (first
    arrival → last finish), whole plan."""
    goodput_rps: float = Field(ge=0)
    """Highest request rate at which the SLO percentile holds, requests/s (whole plan)."""
    goodput_rps_per_gpu: float = Field(ge=0)
    """`goodput_rps` / `gpus_used`, requests/s per GPU."""
    gpus_used: int = Field(ge=1)
    """GPUs the plan's instances take (count × tensor × pipeline × expert, summed)."""
    kv_cache_gib: float = Field(ge=0)
    """KV-cache memory per GPU (the largest over the plan's instances), GiB."""
    kv_capacity_tokens: int | None = Field(default=None, ge=0)
    """KV-cache tokens one instance holds (decode instance when disaggregated)."""
    weights_gib: float | None = Field(default=None, ge=0)
    """Weight memory per GPU (the largest over the plan's instances), GiB."""
    max_concurrent_sequences: int = Field(ge=0)
    """Peak number of sequences admitted at once (holding KV cache), summed over the
    instances, in the simulation at `arrival_rate_rps` (count)."""
    arrival_rate_rps: float = Field(ge=0)
    """The rate the percentiles were measured at, requests/s: the workload's (or its
    trace's) rate; without one, the plan's goodput (or, for a closed loop under
    `max_concurrency`, the rate it achieves; when no rate meets the SLO, a light load)."""
    slo_attainment: float = Field(ge=0, le=1)
    """Fraction of requests meeting both targets at that rate, 0–1."""
    requests_simulated: int | None = Field(default=None, ge=0)
    """Requests in the simulation the percentiles come from (count)."""
    preemptions: int = Field(default=0, ge=0)
    """Requests preempted for KV-cache space and prefilled again at that rate (engines that
    page their cache: vLLM, SGLang; `GET /v1/engines`)."""
    price_per_hour: float | None = Field(default=None, ge=0)
    """What the plan's GPUs cost per hour, in the currency of the node groups'
    `price_per_gpu_hour` (null when no group the plan uses has a price)."""
    goodput_rps_before: float | None = Field(default=None, ge=0)
    """Re-planned plans (`POST /v1/plans/{id}/replan`): the goodput of the plan re-planned,
    on the cluster before the change, requests/s (`solver/serving/replan.py`); null
    otherwise."""
    restart_instances: int | None = Field(default=None, ge=0)
    """Re-planned plans: engine instances (replicas) started anew, count."""
    restart_gpus: int | None = Field(default=None, ge=0)
    """Re-planned plans: GPUs of the instances started anew, count."""
    restart_kept_instances: int | None = Field(default=None, ge=0)
    """Re-planned plans: instances of the old plan that keep running (same layout, all
    their GPUs alive), count."""
    restart_reload_bytes: float | None = Field(default=None, ge=0)
    """Re-planned plans: weights the restarted instances load from storage, bytes."""
    restart_peer_bytes: float | None = Field(default=None, ge=0)
    """Re-planned plans: bytes fetched from surviving GPUs (0: engines load their weights
    from storage)."""
    restart_s: float | None = Field(default=None, ge=0)
    """Re-planned plans: relaunch overhead + the weight load, seconds (0 when nothing
    restarts)."""
    restart_goodput_rps: float | None = Field(default=None, ge=0)
    """Re-planned plans: goodput while the restarted instances load (the kept instances
    alone), requests/s."""
    restart_lost_requests: float | None = Field(default=None, ge=0)
    """Re-planned plans: (goodput_rps − restart_goodput_rps) × restart_s, requests."""
    restart_roles: list[ServingRestartRole] | None = None
    """Re-planned plans: per instance of the plan, what it keeps and restarts."""
    replan_keep: bool | None = None
    """Re-planned plans: true for the plan keeping the old plan's instance layouts with
    re-fitted counts (`stats.replan.keep`)."""
    break_even_s: float | None = None
    """Re-planned plans: seconds after the change from which this plan has served more
    requests than the keep plan; null when it never does (or for keep itself)."""


__all__ = [
    "ENGINE_ALIASES",
    "MAX_LIST_ROWS",
    "MAX_TOKENS",
    "InstanceRole",
    "KVPrecision",
    "LengthSpec",
    "ServingInstance",
    "ServingMetrics",
    "ServingObjective",
    "ServingParallelism",
    "ServingPlan",
    "ServingRestartRole",
    "ServingSLO",
    "ServingWorkload",
    "WeightFormat",
    "canonical_engine_name",
]
