"""`/docs` and `/redoc` work on a machine without internet: the pages name no external host
and every file they load is served by the service (issue 14, point 1). The browser half of
this (the pages render with every off-machine request refused) is in test_ui_browser.py."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import pytest

from app.api.docs import ASSET_FILES, ASSETS_URL, REDOC_REMOTE_LOGO


class _Urls(HTMLParser):
    """Every `src` / `href` / `spec-url` of a page, and every URL written in its inline scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[str] = []
        self.script = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs += [v for k, v in attrs if k in ("src", "href", "spec-url") and v]
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script += data


def _page_urls(html: str) -> tuple[list[str], list[str]]:
    parser = _Urls()
    parser.feed(html)
    inline = re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}[^\s'\"]*", parser.script)
    quoted = re.findall(r"['\"](/[^'\"\s]*)['\"]", parser.script)
    return parser.attrs + quoted, inline


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_reference_no_external_host(client: Any, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    local, external = _page_urls(response.text)
    assert external == []  # no URL with a host in the inline scripts
    assert local, "the page loads nothing: the test would pass on an empty page"
    for url in local:
        parts = urlsplit(url)
        assert parts.scheme == "" and parts.netloc == "", url
    # what the page loads is served, with content
    loaded = [u for u in local if u.startswith(ASSETS_URL) or u == "/openapi.json"]
    assert "/openapi.json" in loaded
    assert any(u.endswith(".js") for u in loaded)
    for url in loaded:
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 1000, url


def test_docs_assets_are_the_real_libraries(client: Any) -> None:
    sizes = {name: client.get(f"{ASSETS_URL}/{name}") for name in ASSET_FILES}
    assert all(r.status_code == 200 for r in sizes.values())
    assert "javascript" in sizes["swagger-ui-bundle.js"].headers["content-type"]
    assert "SwaggerUIBundle" in sizes["swagger-ui-bundle.js"].text
    assert "Redoc" in sizes["redoc.standalone.js"].text
    assert REDOC_REMOTE_LOGO not in sizes["redoc.standalone.js"].text  # served patched
    assert sizes["swagger-ui.css"].headers["content-type"].startswith("text/css")
    assert sizes["favicon.png"].content[:8] == b"\x89PNG\r\n\x1a\n"


def test_swagger_validator_badge_is_off(client: Any) -> None:
    """Swagger UI would otherwise send the document to validator.swagger.io."""
    html = client.get("/docs").text
    assert re.search(r'"validatorUrl":\s*null', html)


def test_docs_work_behind_a_root_path(client: Any) -> None:
    """Behind a proxy that mounts the service under a prefix, the pages load from it."""
    html = client.get("/docs", headers={}, params={}).text
    assert f"{ASSETS_URL}/swagger-ui-bundle.js" in html
    from fastapi.testclient import TestClient

    with TestClient(client.app, root_path="/meshplan") as prefixed:
        html = prefixed.get("/docs").text
    assert "/meshplan/docs-assets/swagger-ui-bundle.js" in html
    assert "/meshplan/openapi.json" in html
