"""API documentation pages that work without internet: Swagger UI at `/docs`, ReDoc at
`/redoc`, their JavaScript and CSS served by the service itself under `/docs-assets/`.

FastAPI's default pages load Swagger UI and ReDoc from a CDN (jsdelivr) and ReDoc's fonts
from Google: blank on an air-gapped cluster. The assets come from the `fastapi-offline`
package (MIT; it ships Swagger UI's `swagger-ui-bundle.js`/`swagger-ui.css` under Apache 2.0
and ReDoc's `redoc.standalone.js` under MIT), located through its package data, so a
`pip install` is all that provides them; the pages themselves are FastAPI's own HTML
builders pointed at the local files. Two requests the libraries would still make are
removed: Swagger UI's online validator badge (`validatorUrl`, a request to
validator.swagger.io) is switched off, and ReDoc's sidebar image of its maker's logo
(`https://cdn.redoc.ly/redoc/logo-mini.svg`, hard-wired in `redoc.standalone.js` 2.x) is
replaced by an empty inline SVG in the copy of the bundle this module serves.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse, Response

ASSETS_URL = "/docs-assets"
"""Where the Swagger UI and ReDoc files are served."""

ASSET_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
"""The files the two pages load (all of them local)."""


REDOC_REMOTE_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
"""The one file ReDoc's bundle fetches from the internet by itself (its sidebar logo)."""

_EMPTY_SVG = "data:image/svg+xml,%3Csvg%20xmlns='http://www.w3.org/2000/svg'/%3E"


def assets_dir() -> Path:
    """The directory of the vendored assets inside the installed `fastapi_offline` package."""
    return Path(str(files("fastapi_offline").joinpath("static")))


def install_offline_docs(app: FastAPI) -> None:
    """Serve `/docs`, `/docs/oauth2-redirect` and `/redoc` from local assets. The app must be
    created with `docs_url=None, redoc_url=None` so FastAPI's CDN pages are not registered."""
    directory = assets_dir()
    missing = [name for name in ASSET_FILES if not (directory / name).is_file()]
    if missing:  # a broken install: fail at start-up, not with a blank page later
        raise RuntimeError(f"API docs assets missing from {directory}: {missing}")
    redoc_text = (directory / "redoc.standalone.js").read_text(encoding="utf-8")
    redoc_js = redoc_text.replace(REDOC_REMOTE_LOGO, _EMPTY_SVG).encode()

    @app.get(f"{ASSETS_URL}/redoc.standalone.js", include_in_schema=False)
    async def redoc_bundle() -> Response:
        return Response(
            redoc_js,
            media_type="text/javascript; charset=utf-8",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    app.mount(ASSETS_URL, StaticFiles(directory=directory), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    def _root(request: Request) -> str:
        return str(request.scope.get("root_path", ""))

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = _root(request)
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} API",
            oauth2_redirect_url=f"{root}{redirect_url}",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None, **(app.swagger_ui_parameters or {})},
        )

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = _root(request)
        return get_redoc_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} API reference",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
