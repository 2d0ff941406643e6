"""The project stands on its own (issue 14, point 6): every relative link in the README and
the docs resolves to a file of this repository, and nothing points outside it (such as the
`../shared` folder a clone does not have)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _relative_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    links = [m.group(1) for m in _LINK.finditer(text)]
    return [u for u in links if not re.match(r"^[a-z][a-z0-9+.-]*:", u) and not u.startswith("#")]


@pytest.mark.parametrize("document", DOCUMENTS, ids=[str(d.relative_to(ROOT)) for d in DOCUMENTS])
def test_relative_links_resolve_inside_the_repository(document: Path) -> None:
    for link in _relative_links(document):
        target = (document.parent / link.split("#", 1)[0]).resolve()
        assert target.is_relative_to(ROOT), f"{document.name}: {link} leaves the repository"
        assert target.exists(), f"{document.name}: {link} does not exist"


def test_the_readme_has_links_to_check() -> None:
    assert len(_relative_links(ROOT / "README.md")) >= 5
