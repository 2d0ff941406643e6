"""Screenshots of the plan explorer's pages (`docs/screenshots/*.png`), taken in Debian's
`chromium` driven by Playwright against a real service (`bench.live_service`, temporary
SQLite): the searches list with the new-search form, a training search, a pipeline plan
(interleaved 1F1B), a serving plan and a comparison.

    python -m bench.screenshots [--out docs/screenshots]

Needs `pip install -e '.[dev]'` (playwright) and `apt-get install chromium`; Playwright's
own browser download is not used (`executable_path`). The searches take about a minute on
two cores (the serving one most)."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.live_service import LiveServer

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")


def find_chromium() -> str | None:
    """The system chromium (`MESHPLAN_CHROMIUM` overrides), or None."""
    override = os.environ.get("MESHPLAN_CHROMIUM")
    if override:
        return override if Path(override).exists() else None
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def launch_browser(playwright: Any) -> Any:
    """Headless system chromium (`--no-sandbox`: CI runs as root in a container)."""
    path = find_chromium()
    if path is None:
        raise RuntimeError("no chromium on PATH (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=path, headless=True, args=["--no-sandbox"])


def service_env(db: Path) -> dict[str, str]:
    """A quick service: searches on threads of the API process, progress every 0.1 s."""
    return {
        "MESHPLAN_DATABASE_URL": f"sqlite:///{db}",
        "MESHPLAN_SEARCH_EXECUTOR": "thread",
        "MESHPLAN_PROGRESS_INTERVAL_S": "0.1",
        "MESHPLAN_SSE_POLL_INTERVAL_S": "0.1",
        "MESHPLAN_LOG_LEVEL": "WARNING",
    }


def wait_ready(page: Any, timeout_ms: float = 60_000) -> None:
    """Until the page's script set `body[data-ready]` (its data drawn)."""
    page.wait_for_selector("body[data-ready='1']", timeout=timeout_ms)


def seed(client: Any) -> dict[str, Any]:
    """A training search on 32 H100 (pipeline plans in its top 10), a serving search."""
    h100 = {"accelerator": "h100-sxm", "gpus_per_node": 8}
    training = client.post(
        "/v1/searches?wait=60",
        json={
            "model": {"preset": "llama3-70b"},
            "cluster": {"node_groups": [{**h100, "num_nodes": 4}]},
            "workload": {"kind": "training", "global_batch_size": 256, "sequence_length": 4096},
        },
    ).json()
    serving = client.post(
        "/v1/searches?wait=60",
        json={
            "model": {"preset": "llama3-8b"},
            "cluster": {"node_groups": [{**h100, "num_nodes": 1}]},
            "workload": {
                "kind": "serving",
                "prompt_tokens": 1024,
                "output_tokens": 256,
                "slo": {"ttft_ms": 1000, "tpot_ms": 50, "percentile": 90},
            },
            "top_k": 5,
        },
    ).json()
    plans = client.get(f"/v1/searches/{training['id']}/plans?limit=10").json()["items"]
    pipelined = next((p for p in plans if p["parallelism"]["pipeline"] > 1), plans[0])
    client.post(  # an example measurement, 7 % slower than predicted
        f"/v1/plans/{pipelined['id']}/measurements",
        json={"step_time_s": pipelined["metrics"]["step_time_s"] * 1.07, "notes": "example"},
    )
    serving_plans = client.get(f"/v1/searches/{serving['id']}/plans?limit=1").json()["items"]
    return {"training": training, "plans": plans, "serving_plan": serving_plans[0]}


def shoot(url: str, seeded: dict[str, Any], out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    plans = seeded["plans"]
    pipelined = next((p for p in plans if p["parallelism"]["pipeline"] > 1), plans[0])
    pages = {
        "searches": "/ui/",
        "search": f"/ui/searches/{seeded['training']['id']}",
        "plan-training": f"/ui/plans/{pipelined['id']}",
        "plan-serving": f"/ui/plans/{seeded['serving_plan']['id']}",
        "compare": "/ui/compare?plans=" + ",".join(p["id"] for p in plans[:3]),
        "api-docs": "/docs",
        "api-redoc": "/redoc",
    }
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as pw:
        browser = launch_browser(pw)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for name, path in pages.items():
            page.goto(url + path)
            if name == "api-docs":
                page.wait_for_selector(".opblock")
            elif name == "api-redoc":
                page.wait_for_selector("[data-section-id*='operation/']")
            elif name == "searches":
                page.wait_for_selector("#searches tbody tr td.best-throughput")
                page.wait_for_function("document.querySelector('#preset').options.length > 0")
            else:
                wait_ready(page, 120_000)
            full = not name.startswith("api-")  # the API pages: their first screen
            if name == "plan-training":
                page.click("#zoom-start")  # the warm-up: the schedule's structure is visible
            target = out / f"{name}.png"
            page.screenshot(path=str(target), full_page=full)
            written.append(target)
        browser.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="meshplan-shots-") as tmp:
        server = LiveServer(service_env(Path(tmp) / "ui.db"), Path(tmp) / "server.log").start()
        try:
            with server.client() as client:
                seeded = seed(client)
            for path in shoot(server.url, seeded, args.out):
                print(path)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
