"""The plan explorer in a real browser: Debian's `chromium` driven by Playwright against a
live service (`uvicorn`, temporary SQLite, `bench.live_service`). The pages render, the
charts draw the plans' own numbers, the new-search form submits and shows the result, and
with auth on the key form lets the pages read the API.

Skips (with the reason) without Playwright (`pip install -e '.[dev]'`) or without a
chromium on PATH (`.ci/run` installs Debian's when it runs as root)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.screenshots import find_chromium, launch_browser, service_env, wait_ready
from tests.support import TINY_MODEL

pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
)
if find_chromium() is None:
    pytest.skip("no chromium on PATH (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import sync_playwright  # noqa: E402

from bench.live_service import LiveServer  # noqa: E402

TINY_CLUSTER = {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4}]}
ADMIN_KEY = "ui-test-admin-key-0123456789abcdef"


@pytest.fixture(scope="module")
def service() -> Iterator[dict[str, Any]]:
    """One live service with a pipelined training search and a serving search of the tiny
    model, and one with auth on, both started at once."""
    with tempfile.TemporaryDirectory(prefix="meshplan-ui-") as tmp:
        root = Path(tmp)
        open_server = LiveServer(service_env(root / "ui.db"), root / "server.log").launch()
        auth_env = {
            **service_env(root / "auth.db"),
            "MESHPLAN_AUTH": "on",
            "MESHPLAN_ADMIN_KEY": ADMIN_KEY,
        }
        auth_server = LiveServer(auth_env, root / "auth.log").launch()
        try:
            open_server.wait_ready(90)
            auth_server.wait_ready(90)
            with open_server.client() as client:
                training = client.post(
                    "/v1/searches?wait=30",
                    json={
                        "model": TINY_MODEL,
                        "cluster": TINY_CLUSTER,
                        "workload": {
                            "kind": "training",
                            "global_batch_size": 16,
                            "sequence_length": 512,
                        },
                        "constraints": {"fixed": {"pipeline": 2}},
                        "top_k": 5,
                    },
                ).json()
                serving = client.post(
                    "/v1/searches?wait=30",
                    json={
                        "model": TINY_MODEL,
                        "cluster": {
                            "node_groups": [{**TINY_CLUSTER["node_groups"][0], "gpus_per_node": 2}]
                        },
                        "workload": {
                            "kind": "serving",
                            "prompt_tokens": 256,
                            "output_tokens": 64,
                            "slo": {"ttft_ms": 1000, "tpot_ms": 50, "percentile": 90},
                        },
                        "top_k": 3,
                    },
                ).json()
                assert training["status"] == serving["status"] == "succeeded"
                plans = client.get(f"/v1/searches/{training['id']}/plans").json()["items"]
                serving_plans = client.get(f"/v1/searches/{serving['id']}/plans").json()["items"]
                client.post(
                    f"/v1/plans/{plans[0]['id']}/measurements",
                    json={"step_time_s": plans[0]["metrics"]["step_time_s"] * 1.1},
                )
            with sync_playwright() as pw:
                browser = launch_browser(pw)
                try:
                    yield {
                        "url": open_server.url,
                        "auth_url": auth_server.url,
                        "client": open_server.client,
                        "browser": browser,
                        "training": training,
                        "plans": plans,
                        "serving": serving,
                        "serving_plans": serving_plans,
                    }
                finally:
                    browser.close()
        finally:
            open_server.stop()
            auth_server.stop()


@pytest.fixture
def page(service: dict[str, Any]) -> Iterator[Any]:
    context = service["browser"].new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, errors  # no script error on any page


def chart_data(page: Any, canvas: str) -> list[dict[str, Any]]:
    """The datasets Chart.js holds for the chart on `canvas` (label and data points)."""
    return page.evaluate(
        "id => Chart.getChart(id).data.datasets.map(d => ({label: d.label, data: d.data}))", canvas
    )


def test_root_redirects_to_the_searches_list(service: dict[str, Any], page: Any) -> None:
    page.goto(service["url"] + "/")
    assert page.url == service["url"] + "/ui/"
    page.wait_for_selector("#searches tbody tr td.best-throughput")
    rows = page.locator("#searches tbody tr")
    assert rows.count() == 2
    row = page.locator(f"#searches tr[data-search-id='{service['training']['id']}']")
    best = float(row.locator("td.best-throughput").get_attribute("data-value"))
    assert best == pytest.approx(service["plans"][0]["metrics"]["tokens_per_s"])
    assert row.locator("td").nth(7).inner_text() == str(len(service["plans"]))


def test_search_page_table_and_pareto_charts(service: dict[str, Any], page: Any) -> None:
    page.goto(f"{service['url']}/ui/searches/{service['training']['id']}")
    wait_ready(page)
    plans = service["plans"]
    assert page.locator("#plans tbody tr").count() == len(plans)
    memory = chart_data(page, "pareto-memory")[0]["data"]
    assert [(pt["x"], pt["y"]) for pt in memory] == [
        (p["metrics"]["peak_memory_gib"], p["metrics"]["tokens_per_s"]) for p in plans
    ]
    gpus = chart_data(page, "pareto-gpus")[0]["data"]
    world = [
        p["parallelism"]["data"]
        * p["parallelism"]["tensor"]
        * p["parallelism"]["pipeline"]
        * p["parallelism"]["context"]
        for p in plans
    ]
    assert [pt["x"] for pt in gpus] == world == [4] * len(plans)
    # the front holds the points no other plan beats on both axes
    front = chart_data(page, "pareto-memory")[1]["data"]
    pts = [(p["metrics"]["peak_memory_gib"], p["metrics"]["tokens_per_s"]) for p in plans]
    expected = {a for a in pts if not any(b != a and b[1] >= a[1] and b[0] <= a[0] for b in pts)}
    assert {(pt["x"], pt["y"]) for pt in front} == expected
    # sorting: click "tokens/s" (ascending), the rows follow the values
    page.locator("#plans th", has_text="tokens/s").click()
    cells = page.locator("#plans tbody tr td:nth-child(9)")
    values = [float(cells.nth(i).get_attribute("data-value")) for i in range(cells.count())]
    assert values == sorted(p["metrics"]["tokens_per_s"] for p in plans)
    assert page.locator("#explanations li").first.inner_text().endswith(plans[0]["explanation"])


def test_plan_page_draws_the_cost_models_schedule(service: dict[str, Any], page: Any) -> None:
    plan = service["plans"][0]
    page.goto(f"{service['url']}/ui/plans/{plan['id']}")
    wait_ready(page)
    # the cost model's per-rank numbers, read here through POST /v1/estimate
    training = service["training"]
    keys = (
        "parallelism",
        "micro_batch_size",
        "zero_stage",
        "recompute",
        "pipeline_schedule",
        "stage_layers",
        "flash_attention",
        "framework",
    )
    body = {
        "model": training["model"],
        "cluster": {"node_groups": TINY_CLUSTER["node_groups"]},
        "workload": {"kind": "training", "global_batch_size": 16, "sequence_length": 512},
        "plan": {k: plan[k] for k in keys},
    }
    with service["client"]() as client:
        details = client.post("/v1/estimate", json=body).json()["details"]
    m, v = details["num_microbatches"], plan["parallelism"]["virtual_pipeline"]
    datasets = {d["label"]: d["data"] for d in chart_data(page, "timeline")}
    for j in range(plan["parallelism"]["pipeline"]):
        stage = f"stage {j}"
        fwd = [pt["x"] for pt in datasets["forward"] if pt["y"] == stage]
        bwd = [pt["x"] for pt in datasets["backward"] if pt["y"] == stage]
        comm = [pt["x"] for pt in datasets.get("communication", []) if pt["y"] == stage]
        assert len(fwd) == len(bwd) == m * v
        busy = sum(b - a for a, b in fwd + bwd + comm)
        assert busy == pytest.approx(m * details["rank_work_s"][j], rel=1e-9)
    # memory: stacked bars are the plan's per-stage memory, the line its capacity
    mem = {d["label"]: d["data"] for d in chart_data(page, "memory")}
    stages = plan["memory"]["by_stage"]
    assert mem["weights"] == [s["weights_gib"] for s in stages]
    assert mem["activations"] == [s["activations_gib"] for s in stages]
    assert mem["capacity"] == [plan["memory"]["capacity_gib"]] * len(stages)
    breakdown = chart_data(page, "breakdown")[0]["data"]
    assert sum(breakdown) == pytest.approx(sum(plan["metrics"]["time_breakdown_s"].values()))
    assert page.locator("#warnings li").count() == len(plan["warnings"])
    assert page.locator("#measurements tbody tr").count() == 1
    page.locator("button.export[data-format='megatron']").click()
    page.wait_for_function("document.querySelector('#export-output').textContent.length > 0")
    assert (
        f"--pipeline-model-parallel-size {plan['parallelism']['pipeline']}"
        in page.locator("#export-output").inner_text()
    )


def test_serving_plan_latencies_and_goodput(service: dict[str, Any], page: Any) -> None:
    plan = service["serving_plans"][0]
    page.goto(f"{service['url']}/ui/plans/{plan['id']}")
    wait_ready(page)
    m = plan["metrics"]
    assert chart_data(page, "ttft")[0]["data"] == [
        m["ttft_ms_p50"],
        m["ttft_ms_p90"],
        m["ttft_ms_p99"],
    ]
    assert chart_data(page, "tpot")[0]["data"] == [
        m["tpot_ms_p50"],
        m["tpot_ms_p90"],
        m["tpot_ms_p99"],
    ]
    assert chart_data(page, "ttft")[1]["data"][0] == 1000  # the SLO line
    curve = chart_data(page, "goodput")[0]["data"]
    rates = [pt["x"] for pt in curve]
    assert rates == pytest.approx(
        [f * m["goodput_rps"] for f in (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5)]
    )
    assert all(0 <= pt["y"] <= pt["x"] * (1 + 1e-12) for pt in curve)  # goodput ≤ offered rate
    assert page.locator(".training-only").first.is_hidden()


def test_compare_highlights_differences(service: dict[str, Any], page: Any) -> None:
    a, b = service["plans"][0], service["plans"][-1]
    page.goto(f"{service['url']}/ui/compare?plans={a['id']},{b['id']}")
    wait_ready(page)
    assert page.locator("#compare-table thead th").count() == 3
    assert "diff" in page.locator("tr[data-row='rank']").get_attribute("class")
    assert "diff" not in (page.locator("tr[data-row='kind']").get_attribute("class") or "")
    step = page.locator("tr[data-row='step time (s)'] td")
    assert "best" in step.nth(0).get_attribute("class")  # rank 1 is the fastest


def test_new_search_form_submits_and_shows_the_result(service: dict[str, Any], page: Any) -> None:
    page.goto(service["url"] + "/ui/")
    page.wait_for_function("document.querySelector('#preset').options.length > 0")
    page.select_option("#preset", "llama2-7b")
    page.select_option("#accelerator", "h100-sxm")
    page.fill("input[name=num_nodes]", "1")
    page.fill("input[name=gpus_per_node]", "4")
    page.fill("input[name=global_batch_size]", "32")
    page.fill("input[name=sequence_length]", "2048")
    page.fill("input[name=top_k]", "3")
    page.click("#submit")
    link = page.wait_for_selector("#result-link", timeout=60_000)
    search_id = link.get_attribute("href").rsplit("/", 1)[1]
    with service["client"]() as client:
        search = client.get(f"/v1/searches/{search_id}").json()
    assert search["status"] == "succeeded"
    assert search["model_name"] == "llama2-7b" and search["num_gpus"] == 4
    assert search["workload"]["global_batch_size"] == 32
    assert f"{search['num_plans']} plans" in page.locator("#result").inner_text()
    page.wait_for_selector(f"#searches tr[data-search-id='{search_id}']")


def test_auth_on_asks_for_the_key_once(service: dict[str, Any], page: Any) -> None:
    page.goto(service["auth_url"] + "/ui/")
    page.wait_for_selector("#key-form", state="visible")
    assert page.locator("#searches tbody tr").count() == 0
    page.fill("#key-input", ADMIN_KEY)
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#key-form", state="hidden")
    page.wait_for_function("document.querySelector('#preset').options.length > 0")
    assert page.locator("#error").is_hidden()
    assert page.evaluate("sessionStorage.getItem('meshplan.api_key')") == ADMIN_KEY


def _offline_context(service: dict[str, Any]) -> tuple[Any, list[str]]:
    """A browser context that refuses (and records) every request leaving 127.0.0.1: what a
    machine without internet does to the page."""
    context = service["browser"].new_context(viewport={"width": 1280, "height": 900})
    refused: list[str] = []

    def route(r: Any) -> None:
        host = r.request.url.split("/")[2].split(":")[0] if "://" in r.request.url else ""
        if r.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    return context, refused


def _operations(service: dict[str, Any]) -> list[tuple[str, str]]:
    with service["client"]() as client:
        paths = client.get("/openapi.json").json()["paths"]
    return [(m.upper(), p) for p, item in paths.items() for m in item if m != "parameters"]


def test_swagger_ui_renders_offline(service: dict[str, Any]) -> None:
    context, refused = _offline_context(service)
    try:
        page = context.new_page()
        page.goto(service["url"] + "/docs")
        page.wait_for_selector(".opblock", timeout=30_000)
        operations = _operations(service)
        assert page.locator(".opblock").count() == len(operations)
        shown = page.locator(".opblock-summary-path").first.get_attribute("data-path")
        assert shown in {p for _, p in operations}
    finally:
        context.close()
    assert refused == []


def test_redoc_renders_offline(service: dict[str, Any]) -> None:
    context, refused = _offline_context(service)
    try:
        page = context.new_page()
        page.goto(service["url"] + "/redoc")
        page.wait_for_selector("[data-section-id*='operation/']", timeout=30_000)
        sections = page.eval_on_selector_all(
            "[data-section-id*='operation/']", "els => els.map(e => e.dataset.sectionId)"
        )
        # each operation once under its own id (ReDoc also lists it under its tag)
        ops = {s for s in sections if s.startswith("operation/")}
        assert len(ops) == len(_operations(service))
    finally:
        context.close()
    assert refused == []
