"""The query parameters of an export, validated before anything is rendered.

Every value an export may write into a script or manifest passes one of these rules, so no
value can carry a newline, a `;`, a backtick or `$(`; the exporters additionally quote what
they write into shell (`shlex.quote`) and YAML is written by a YAML dumper.

- `time` (slurm): a Slurm duration, one of the forms of `sbatch --time` (Slurm's sbatch(1)
  manual): `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`, or `UNLIMITED` /
  `INFINITE`.
- `cpus_per_task` (slurm): an integer 1..4096 (ASCII digits).
- `image`, `router_image` (kubernetes): a container image reference in the grammar of the
  distribution project's `reference` package (the OCI / Docker name grammar):
  `[domain[:port]/]path[:tag][@digest]`, lower-case path components joined by `.`, `_`,
  `__` or dashes, a tag of at most 128 word characters, dots and dashes, a digest
  `algorithm:hex`; at most 255 characters of name.
- `framework`, `kind`: a lower-case identifier (which ones a format takes is the format's own
  rule).

Unknown parameters are ignored (they reach no exporter). A bad value is a 422 naming the
parameter, its rule and the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from specs.errors import SpecError

_SLURM_TIME = re.compile(
    r"(?:\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}"
    r"|UNLIMITED|INFINITE)",
    re.ASCII,
)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_IMAGE = re.compile(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_-]{0,31}", re.ASCII | re.IGNORECASE)
_MAX_IMAGE_NAME = 255
MAX_CPUS = 4096
"""The largest `cpus_per_task` an export accepts."""


def _refuse(name: str, rule: str, value: str, what: str) -> SpecError:
    return SpecError(name, rule, value, f"query parameter {name} must be {what} (got {value!r})")


def _image(name: str, value: str) -> None:
    if not _IMAGE.fullmatch(value) or len(value.split("@")[0].split(":")[0]) > _MAX_IMAGE_NAME:
        raise _refuse(
            name,
            "container-image-reference",
            value,
            "a container image reference ([registry/]name[:tag][@digest])",
        )


def _time(name: str, value: str) -> None:
    if not _SLURM_TIME.fullmatch(value):
        raise _refuse(
            name,
            "slurm-duration",
            value,
            "a Slurm duration (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)",
        )


def _cpus(name: str, value: str) -> None:
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_CPUS):
        raise _refuse(name, "positive-integer", value, f"an integer from 1 to {MAX_CPUS}")


def _identifier(name: str, value: str) -> None:
    if not _IDENTIFIER.fullmatch(value):
        raise _refuse(name, "identifier", value, "a name of letters, digits, '-' or '_'")


RULES = {
    "time": _time,
    "cpus_per_task": _cpus,
    "image": _image,
    "router_image": _image,
    "framework": _identifier,
    "kind": _identifier,
}
"""Every query parameter an exporter reads, with its rule."""


def validate_options(options: Mapping[str, str]) -> dict[str, str]:
    """The known parameters of `options`, each checked (SpecError naming the first bad one)."""
    out = {}
    for name, check in RULES.items():
        if name in options:
            value = str(options[name])
            check(name, value)
            out[name] = value
    return out
