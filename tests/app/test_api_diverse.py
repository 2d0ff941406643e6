"""The diverse top-k over HTTP (issue 14, point 7): `GET /v1/searches/{id}/plans` lists the
non-dominated plans, `?include_dominated=true` adds the plans folded under them with
`dominated_by` (a plan id of the same listing) and `dominated_reason`; ranks are consecutive
in both lists, pages number on, `GET /v1/plans/{id}` agrees with the list that shows the
plan, and the client and the CLI pass the flag. The folding is checked here from the
plans' own fields (same layout, no better step time or memory), not by the solver's code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.cli import cli
from tests.support import TINY_MODEL

TUNING = ("recompute", "micro_batch_size", "zero_stage", "flash_attention", "stage_layers")
"""Plan fields a folded plan may differ in from its dominator (and sequence parallelism)."""


def _search(client: Any, tiny: dict[str, Any], top_k: int = 5) -> dict[str, Any]:
    search = client.post("/v1/searches?wait=30", json={**tiny, "top_k": top_k}).json()
    assert search["status"] == "succeeded", search
    return search


def _layout(plan: dict[str, Any]) -> tuple[Any, ...]:
    par = {k: v for k, v in plan["parallelism"].items() if k != "sequence_parallel"}
    return (sorted(par.items()), plan["pipeline_schedule"], plan["framework"])


def test_the_default_list_hides_folded_plans_and_include_dominated_shows_them(
    client: Any, tiny: dict[str, Any]
) -> None:
    search = _search(client, tiny, top_k=5)
    shown = client.get(f"/v1/searches/{search['id']}/plans").json()
    every = client.get(f"/v1/searches/{search['id']}/plans?include_dominated=true").json()
    short, full = shown["items"], every["items"]
    # the tiny search has more tuning variants than layouts: some are folded
    assert len(short) == 5 == search["num_plans"] == shown["total"]
    assert every["total"] == len(full) > len(short)
    assert all(p["dominated_by"] is None and p["dominated_reason"] is None for p in short)
    assert [p["rank"] for p in short] == list(range(1, len(short) + 1))
    assert [p["rank"] for p in full] == list(range(1, len(full) + 1))
    # the non-dominated plans of the full list are the default list, in order
    roots = [p for p in full if p["dominated_by"] is None]
    assert [p["id"] for p in roots] == [p["id"] for p in short]
    by_id = {p["id"]: p for p in full}
    steps = [p["metrics"]["step_time_s"] for p in full]
    assert steps == sorted(steps)
    for plan in full:
        if plan["dominated_by"] is None:
            continue
        top = by_id[plan["dominated_by"]]  # an id of the same listing
        assert top["dominated_by"] is None and top["rank"] < plan["rank"]
        assert top["search_id"] == plan["search_id"] == search["id"]
        assert _layout(top) == _layout(plan)
        assert any(top[f] != plan[f] for f in TUNING) or (
            top["parallelism"]["sequence_parallel"] != plan["parallelism"]["sequence_parallel"]
        )
        assert top["metrics"]["step_time_s"] <= plan["metrics"]["step_time_s"]
        assert top["metrics"]["peak_memory_gib"] <= plan["metrics"]["peak_memory_gib"] * (1 + 1e-8)
        assert top["metrics"]["tokens_per_s"] >= plan["metrics"]["tokens_per_s"] * (1 - 1e-8)
        reason = plan["dominated_reason"]
        assert "instead of" in reason and "no better on step time" in reason
        assert "peak memory" in reason and "GPUs (same)" in reason
    # the plans ranked after the 5th non-dominated one are not listed (they were never
    # needed: the search may not even have priced them)
    assert full[-1]["id"] == short[-1]["id"]


def test_pages_number_on_in_both_lists(client: Any, tiny: dict[str, Any]) -> None:
    search = _search(client, tiny, top_k=4)
    base = f"/v1/searches/{search['id']}/plans"
    for query in ("", "&include_dominated=true"):
        whole = client.get(f"{base}?limit=1000{query}").json()["items"]
        pages: list[dict[str, Any]] = []
        url = f"{base}?limit=2{query}"
        while True:
            page = client.get(url).json()
            pages.extend(page["items"])
            if page["next_cursor"] is None:
                break
            url = f"{base}?limit=2&cursor={page['next_cursor']}{query}"
        assert pages == whole
        assert [p["rank"] for p in pages] == list(range(1, len(whole) + 1))
        by_offset = client.get(f"{base}?limit=2&offset=2{query}").json()["items"]
        assert by_offset == whole[2:4]


def test_a_plan_read_by_id_has_the_rank_its_list_shows(client: Any, tiny: dict[str, Any]) -> None:
    search = _search(client, tiny, top_k=5)
    short = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    full = client.get(f"/v1/searches/{search['id']}/plans?include_dominated=true").json()["items"]
    for plan in short:
        assert client.get(f"/v1/plans/{plan['id']}").json() == plan
    folded = [p for p in full if p["dominated_by"] is not None]
    assert folded
    for plan in folded:
        assert client.get(f"/v1/plans/{plan['id']}").json() == plan


def test_the_query_parameter_is_described_in_openapi(client: Any) -> None:
    spec = client.get("/openapi.json").json()
    params = spec["paths"]["/v1/searches/{search_id}/plans"]["get"]["parameters"]
    flag = next(p for p in params if p["name"] == "include_dominated")
    assert flag["in"] == "query" and flag["schema"]["type"] == "boolean"
    assert flag["schema"]["default"] is False
    assert "dominated_by" in flag["description"]
    plan = spec["components"]["schemas"]["PlanPublic"]["properties"]
    assert "dominated_by" in plan and "dominated_reason" in plan


def test_a_bad_flag_value_is_a_422_naming_the_field(client: Any, tiny: dict[str, Any]) -> None:
    search = _search(client, tiny, top_k=2)
    response = client.get(f"/v1/searches/{search['id']}/plans?include_dominated=maybe")
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "include_dominated" in response.text


def test_plans_stored_without_folding_read_as_non_dominated(
    client: Any, tiny: dict[str, Any]
) -> None:
    """Rows stored before revision 0006 have no `dominated_by`: every plan is listed by
    default, with its stored rank."""
    from sqlmodel import Session, select

    from app.db.models import PlanRecord

    search = _search(client, tiny, top_k=3)
    engine = client.app.state.engine
    with Session(engine) as session:
        for row in session.exec(select(PlanRecord).where(PlanRecord.search_id == search["id"])):
            row.dominated_by, row.dominated_reason = None, None
            session.add(row)
        session.commit()
    short = client.get(f"/v1/searches/{search['id']}/plans").json()
    full = client.get(f"/v1/searches/{search['id']}/plans?include_dominated=true").json()
    assert short == full and short["total"] > 3
    assert [p["rank"] for p in short["items"]] == list(range(1, short["total"] + 1))


def test_the_client_passes_the_flag(client: Any, tiny: dict[str, Any]) -> None:
    import httpx

    from meshplan_client import MeshplanClient

    search = _search(client, tiny, top_k=3)
    seen: list[str] = []

    def forward(request: httpx.Request) -> httpx.Response:  # to the app under test
        seen.append(str(request.url.query, "ascii"))
        answer = client.get(f"{request.url.path}?{seen[-1]}")
        return httpx.Response(answer.status_code, json=answer.json())

    with MeshplanClient("http://meshplan.test", transport=httpx.MockTransport(forward)) as api:
        short = api.list_plans(search["id"])
        full = api.list_plans(search["id"], include_dominated=True)
    assert "include_dominated" not in seen[0] and "include_dominated=true" in seen[-1]
    assert len(short) == 3 and len(full) > 3
    assert {p.dominated_by for p in full} - {None} <= {p.id for p in short}
    assert all(p.dominated_by is None for p in short)


# ---- the CLI -------------------------------------------------------------------------------
runner = CliRunner()


@pytest.fixture
def _local_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHPLAN_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("MESHPLAN_URL", raising=False)
    monkeypatch.delenv("MESHPLAN_SEARCH_EXECUTOR", raising=False)


def _rows(output: str) -> list[list[str]]:
    rows: list[list[str]] = []
    for line in output.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if rows and not cells[0]:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    return rows


@pytest.mark.usefixtures("_local_database")
def test_cli_plans_include_dominated(tmp_path: Path) -> None:
    model = tmp_path / "tiny.json"
    model.write_text(json.dumps(TINY_MODEL))
    args = ["--cluster", "h100-sxm:1x4", "--global-batch", "8", "--seq", "512", "--top-k", "3"]
    made = runner.invoke(cli, ["search", "--model", str(model), *args, "--json"])
    assert made.exit_code == 0, made.output
    search_id = json.loads(made.stdout)["search"]["id"]
    short = json.loads(runner.invoke(cli, ["plans", search_id, "--json"]).stdout)
    listed = runner.invoke(cli, ["plans", search_id, "--include-dominated", "--json"])
    assert listed.exit_code == 0, listed.output
    full = json.loads(listed.stdout)
    assert len(short) == 3 and len(full) > 3
    assert [p["id"] for p in full if p["dominated_by"] is None] == [p["id"] for p in short]
    table = runner.invoke(
        cli, ["plans", search_id, "--include-dominated", "--wide"], env={"COLUMNS": "220"}
    )
    assert table.exit_code == 0, table.output
    rows = _rows(table.stdout)
    header = next(line for line in table.stdout.splitlines() if "under" in line)
    assert "rank" in header
    rank_of = {p["id"]: p["rank"] for p in full}
    # columns: id, rank, under, ... (the id column comes first with show_ids)
    body = [r for r in rows if r[0] in rank_of]
    assert [r[0] for r in body] == [p["id"] for p in full]
    for row, plan in zip(body, full, strict=True):
        want = f"#{rank_of[plan['dominated_by']]}" if plan["dominated_by"] else ""
        assert row[1] == str(plan["rank"]) and row[2] == want
    plain = runner.invoke(cli, ["plans", search_id, "--wide"], env={"COLUMNS": "220"})
    assert "under" not in plain.stdout.splitlines()[1]


def test_serving_plans_fold_under_an_equal_better_ranked_layout(client: Any) -> None:
    """Llama-3-8B on 8 H100: a prefill chunk of 8192 tokens changes nothing for 1,024-token
    prompts, so that variant matches the one without chunking on every metric and folds."""
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": {
            "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}]
        },
        "workload": {
            "kind": "serving",
            "prompt_tokens": 1024,
            "output_tokens": 256,
            "slo": {"ttft_ms": 1000, "tpot_ms": 50, "percentile": 90},
        },
        "top_k": 10,
    }
    search = client.post("/v1/searches?wait=60", json=body).json()
    assert search["status"] == "succeeded"
    shown = client.get(search["plans_url"]).json()["items"]
    every = client.get(search["plans_url"] + "?include_dominated=true").json()["items"]
    folded = [p for p in every if p["dominated_by"] is not None]
    assert folded and len(shown) == len(every) - len(folded) == search["num_plans"]
    assert [p["rank"] for p in shown] == list(range(1, len(shown) + 1))
    by_id = {p["id"]: p for p in every}
    lower = ("ttft_ms_p90", "ttft_ms_p99", "tpot_ms_p90", "tpot_ms_p99", "gpus_used")
    for p in folded:
        top = by_id[p["dominated_by"]]
        assert top["dominated_by"] is None and top["rank"] < p["rank"]
        strip = [
            {k: v for k, v in i.items() if k not in ("max_batch_size", "chunk_size")}
            for i in p["instances"]
        ]
        assert strip == [
            {k: v for k, v in i.items() if k not in ("max_batch_size", "chunk_size")}
            for i in top["instances"]
        ]
        assert all(top["metrics"][k] <= p["metrics"][k] for k in lower)
        assert top["metrics"]["goodput_rps"] >= p["metrics"]["goodput_rps"]
