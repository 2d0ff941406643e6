"""The plan explorer without a browser: the pipeline timeline against the schedules' closed
forms, and the pages, static files and schedule read as HTTP answers."""

from __future__ import annotations

from typing import Any

import pytest

from cost_models.analytical.schedule_timeline import KINDS, simulate, timeline
from specs.errors import SpecError


@pytest.mark.parametrize(
    ("p", "m", "v"), [(1, 4, 1), (2, 3, 1), (4, 8, 1), (4, 8, 2), (4, 16, 4), (8, 64, 8)]
)
def test_uniform_stages_end_at_the_closed_forms(p: int, m: int, v: int) -> None:
    """F = 1, B = 2 on every rank (W = 3): 1F1B ends at (m + p − 1)·W, interleaved at
    m·W + (p − 1)·W/v (Narayanan et al. 2021 §2.2.1-2)."""
    runs = simulate([1.0] * p, [2.0] * p, m, v)
    end = max(run[-1][1] for run in runs)
    expected = (m + p - 1) * 3.0 if v == 1 else m * 3.0 + (p - 1) * 3.0 / v
    assert end == pytest.approx(expected)
    for run in runs:  # every chunk of every micro-batch once, forward and backward
        assert len(run) == 2 * m * v
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(run, run[1:], strict=False))


def test_dependencies_hold_on_uneven_stages() -> None:
    """Each forward starts after the previous stage's forward of its micro-batch, each
    backward after the next stage's backward."""
    fwd, bwd, m = [1.0, 3.0, 2.0], [2.0, 5.0, 4.0], 6
    runs = simulate(fwd, bwd, m)
    end = {(op.forward, op.rank, op.microbatch): (s, e) for run in runs for s, e, op in run}
    for (forward, rank, mb), (start, _) in end.items():
        if forward and rank > 0:
            assert start >= end[(True, rank - 1, mb)][1] - 1e-12
        if not forward and rank < 2:
            assert start >= end[(False, rank + 1, mb)][1] - 1e-12
    # rank j cannot start before the forwards of the ranks before it have run once, then
    # works m·W_j, then waits for the backwards of those ranks: a lower bound on the end
    bound = max(
        sum(fwd[:j]) + m * (fwd[j] + bwd[j]) + sum(bwd[:j]) for j in range(3)
    )  # rank 1: 1 + 6·8 + 2 = 51
    assert bound == 51.0
    assert max(r[-1][1] for r in runs) >= bound


def _details(**over: Any) -> dict[str, Any]:
    base = {
        "num_microbatches": 4,
        "rank_work_s": [3.0, 3.0],
        "rank_forward_s": [1.0, 1.0],
        "rank_data_parallel_exposed_s": [0.5, 0.0],
        "rank_optimizer_s": [0.25, 0.25],
        "p2p_time_s": 0.1,
        "p2p_overlapped": False,
    }
    return {**base, **over}


def test_timeline_kinds_add_up_to_the_cost_model_numbers() -> None:
    t = timeline(_details(), 1, "1f1b")
    kind = {k: i for i, k in enumerate(KINDS)}
    assert t["pipeline_end_s"] == pytest.approx((4 + 2 - 1) * 3.0)
    for j, segs in enumerate(t["stages"]):
        total = {k: sum(s[1] - s[0] for s in segs if s[2] == i) for k, i in kind.items()}
        # stage 0 sends after each forward, stage 1 after each backward: 4 × 0.1 s drawn as
        # communication, carved from the rank's own work (W already counts the transfer)
        assert total["communication"] == pytest.approx(0.4)
        assert total["forward"] + total["backward"] + total["communication"] == pytest.approx(12.0)
        assert total["bubble"] == pytest.approx(t["pipeline_end_s"] - 12.0)
        assert total["data_parallel"] == pytest.approx([0.5, 0.0][j])
        assert total["optimizer"] == pytest.approx(0.25)
    assert t["end_s"] == pytest.approx(15.0 + 0.5 + 0.25)


def test_overlapped_transfers_draw_no_communication() -> None:
    t = timeline(_details(p2p_overlapped=True), 1, "1f1b")
    assert all(s[2] != KINDS.index("communication") for segs in t["stages"] for s in segs)


def test_interleaving_needs_microbatches_divisible_by_stages() -> None:
    """Megatron refuses interleaving when m is not a multiple of p: the timeline names the
    rule instead of drawing another schedule; an unknown schedule is refused alike."""
    with pytest.raises(SpecError) as err:
        timeline(_details(num_microbatches=3), 2, "interleaved_1f1b")
    assert err.value.rule == "interleaved_1f1b.microbatches"
    with pytest.raises(SpecError) as err:
        timeline(_details(), 1, "1f1b_turbo")
    assert err.value.field == "pipeline_schedule"


def test_zero_bubble_timeline_draws_weight_gradients() -> None:
    """ZB-H1 on 2 ranks, F = B = W = 1, m = 4: its closed form (m·3 + (p−1)(F + B − W) = 13)
    is where the simulated flush ends; W is drawn as its own kind, m per rank."""
    details = _details(
        rank_work_s=[3.0, 3.0],
        stage_forward_s=[1.0, 1.0],
        rank_input_grad_s=[1.0, 1.0],
        rank_weight_grad_s=[1.0, 1.0],
        p2p_overlapped=True,
    )
    t = timeline(details, 1, "zero_bubble_h1")
    assert t["pipeline_end_s"] == pytest.approx(13.0)
    w = KINDS.index("weight-gradient")
    for segs in t["stages"]:
        assert sum(1 for s in segs if s[2] == w) == 4


def test_root_redirects_and_pages_render(client: Any) -> None:
    answer = client.get("/", follow_redirects=False)
    assert answer.status_code == 307 and answer.headers["location"] == "/ui/"
    for path in ("/ui/", "/ui/searches/abc", "/ui/plans/abc", "/ui/compare?plans=a,b"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert page.headers["content-type"].startswith("text/html")
        assert '<script src="/ui/static/chart.umd.min.js">' in page.text
        assert "http://" not in page.text and "https://" not in page.text  # nothing off-machine
    assert 'data-plan-ids="a,b"' in client.get("/ui/compare?plans=a,b").text


def test_static_files_are_a_fixed_table(client: Any) -> None:
    chart = client.get("/ui/static/chart.umd.min.js")
    assert chart.status_code == 200 and chart.text.startswith("/*!\n * Chart.js v4.6.1")
    assert client.get("/ui/static/routes.py").status_code == 404
    assert client.get("/ui/static/..%2Froutes.py").status_code == 404


def test_schedule_read(client: Any, tiny: dict[str, Any]) -> None:
    body = {**tiny, "workload": {**tiny["workload"], "global_batch_size": 16}}
    body["constraints"] = {"fixed": {"pipeline": 2}}
    search = client.post("/v1/searches?wait=30", json=body).json()
    plan = client.get(f"/v1/searches/{search['id']}/plans?limit=1").json()["items"][0]
    answer = client.get(f"/ui/data/plans/{plan['id']}/schedule")
    assert answer.status_code == 200
    data = answer.json()
    assert data["step_time_s"] == pytest.approx(plan["metrics"]["step_time_s"])
    d, t = data["details"], data["timeline"]
    v = t["virtual"]
    assert len(t["stages"]) == 2
    for j, segs in enumerate(t["stages"]):
        fwd = sum(s[1] - s[0] for s in segs if s[2] == KINDS.index("forward"))
        comm = sum(s[1] - s[0] for s in segs if s[2] == KINDS.index("communication"))
        bwd = sum(s[1] - s[0] for s in segs if s[2] == KINDS.index("backward"))
        assert fwd + bwd + comm == pytest.approx(d["num_microbatches"] * d["rank_work_s"][j])
        assert sum(1 for s in segs if s[2] == KINDS.index("forward")) == d["num_microbatches"] * v
    assert client.get("/ui/data/plans/nope/schedule").status_code == 404


def test_schedule_read_needs_a_key_with_auth_on(settings_factory: Any) -> None:
    from app.main import create_app
    from tests.support import TestClient

    with TestClient(create_app(settings_factory(auth="on", admin_key="k" * 32))) as c:
        assert c.get("/ui/").status_code == 200  # the page holds no tenant data
        assert 'data-auth="on"' in c.get("/ui/").text
        assert c.get("/ui/data/plans/x/schedule").status_code == 401
        headers = {"authorization": "Bearer " + "k" * 32}
        assert c.get("/ui/data/plans/x/schedule", headers=headers).status_code == 404
