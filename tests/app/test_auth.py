"""Keys, tenants and scopes (MESHPLAN_AUTH=on): every tenant-data endpoint answers a
foreign id with 404, lists show only the caller's tenant, deduplication and idempotency
keys stay inside a tenant, scopes gate writes and key management, revoked keys answer 401,
the bootstrap admin key works, the CLI manages keys, and `serve` refuses to start open on a
non-loopback address."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from datetime import UTC
from typing import Any

import pytest
from app_support import assert_problem
from sqlalchemy import text
from sqlmodel import Session
from typer.testing import CliRunner

from tests.support import TestClient

ADMIN_SECRET = "bootstrap-secret-for-tests"
MEASURED_STEP = 1.3
"""A measured step time as a multiple of the predicted one."""


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


ADMIN = bearer(ADMIN_SECRET)


@pytest.fixture
def auth_client(settings_factory: Callable[..., Any]) -> Iterator[Any]:
    from app.main import create_app

    settings = settings_factory(auth="on", admin_key=ADMIN_SECRET)
    with TestClient(create_app(settings)) as client:
        yield client


def make_key(client: Any, tenant: str, *scopes: str) -> dict[str, Any]:
    response = client.post(
        "/v1/admin/api-keys", json={"tenant": tenant, "scopes": list(scopes)}, headers=ADMIN
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    assert body["secret"].startswith("mp_") and len(body["secret"]) >= 40
    assert body["key"] == body["secret"]  # API.md: the creation answers `{"key", …}`
    return body


def test_tenants_see_only_their_own_data_and_foreign_ids_are_404(
    auth_client: Any, tiny: dict[str, Any]
) -> None:
    a = bearer(make_key(auth_client, "team-a", "write")["secret"])
    b = bearer(make_key(auth_client, "team-b", "write")["secret"])
    created = auth_client.post("/v1/searches?wait=30", json={**tiny, "top_k": 3}, headers=a)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    plans = auth_client.get(f"/v1/searches/{sid}/plans", headers=a).json()["items"]
    pid = plans[0]["id"]
    predicted = plans[0]["metrics"]["step_time_s"]
    measured = auth_client.post(
        f"/v1/plans/{pid}/measurements", json={"step_time_s": MEASURED_STEP * predicted}, headers=a
    )
    assert measured.status_code == 201, measured.text
    mid = measured.json()["id"]

    # the owner reads everything
    for path in (
        f"/v1/searches/{sid}",
        f"/v1/searches/{sid}/plans",
        f"/v1/searches/{sid}/deliveries",
        f"/v1/plans/{pid}",
        f"/v1/plans/{pid}/export/megatron",
        f"/v1/plans/{pid}/measurements",
        f"/v1/plans/{pid}/measurements/{mid}",
        f"/v1/searches/{sid}/events",
    ):
        assert auth_client.get(path, headers=a).status_code == 200, path

    # another tenant gets 404 — the same answer as for an id that does not exist
    for path in (
        f"/v1/searches/{sid}",
        f"/v1/searches/{sid}/plans",
        f"/v1/searches/{sid}/deliveries",
        f"/v1/searches/{sid}/events",
        f"/v1/plans/{pid}",
        f"/v1/plans/{pid}/export/megatron",
        f"/v1/plans/{pid}/measurements",
        f"/v1/plans/{pid}/measurements/{mid}",
    ):
        assert_problem(auth_client.get(path, headers=b), 404, path=path)
    assert_problem(auth_client.post(f"/v1/searches/{sid}/cancel", headers=b), 404)
    foreign = auth_client.post(
        f"/v1/plans/{pid}/measurements", json={"step_time_s": predicted}, headers=b
    )
    assert_problem(foreign, 404)

    # lists: B has nothing, A has its one search
    listed_b = auth_client.get("/v1/searches", headers=b).json()
    assert listed_b["total"] == 0 and listed_b["items"] == []
    listed_a = auth_client.get("/v1/searches", headers=a).json()
    assert listed_a["total"] == 1 and [s["id"] for s in listed_a["items"]] == [sid]

    # calibration counts only the caller's measurements
    cal_a = auth_client.get("/v1/calibration?accelerator=h100-sxm", headers=a).json()
    cal_b = auth_client.get("/v1/calibration?accelerator=h100-sxm", headers=b).json()
    assert cal_a["num_samples"] == 1 and cal_b["num_samples"] == 0
    # and B's measurement list of A's plan stayed empty after its refused POST
    assert auth_client.get(f"/v1/plans/{pid}/measurements", headers=a).json()["total"] == 1

    # B cannot delete A's measurement (404 on both paths); A can, and it is gone
    for path in (f"/v1/measurements/{mid}", f"/v1/plans/{pid}/measurements/{mid}"):
        assert_problem(auth_client.delete(path, headers=b), 404)
    assert auth_client.get(f"/v1/plans/{pid}/measurements", headers=a).json()["total"] == 1
    assert auth_client.delete(f"/v1/measurements/{mid}", headers=a).status_code == 204
    assert auth_client.get(f"/v1/plans/{pid}/measurements", headers=a).json()["total"] == 0


def test_deduplication_never_answers_another_tenants_search(
    auth_client: Any, tiny: dict[str, Any]
) -> None:
    a = bearer(make_key(auth_client, "team-a", "write")["secret"])
    b = bearer(make_key(auth_client, "team-b", "write")["secret"])
    first = auth_client.post("/v1/searches?wait=30", json=tiny, headers=a)
    again_a = auth_client.post("/v1/searches", json=tiny, headers=a)
    same_b = auth_client.post("/v1/searches?wait=30", json=tiny, headers=b)
    assert again_a.headers["x-meshplan-deduplicated"] == first.json()["id"]
    assert "x-meshplan-deduplicated" not in same_b.headers
    assert same_b.json()["id"] != first.json()["id"]
    assert auth_client.get(f"/v1/searches/{same_b.json()['id']}", headers=b).status_code == 200


def test_idempotency_keys_are_per_tenant(auth_client: Any, tiny: dict[str, Any]) -> None:
    a = bearer(make_key(auth_client, "team-a", "write")["secret"])
    b = bearer(make_key(auth_client, "team-b", "write")["secret"])
    key = {"Idempotency-Key": "shared-key-1"}
    other_body = {**tiny, "top_k": 4}
    first_a = auth_client.post("/v1/searches", json=tiny, headers={**a, **key})
    assert first_a.status_code == 202, first_a.text
    # B sends the same key with another body: an independent search, no 409
    first_b = auth_client.post("/v1/searches?dedupe=false", json=other_body, headers={**b, **key})
    assert first_b.status_code == 202, first_b.text
    assert first_b.json()["id"] != first_a.json()["id"]
    assert "idempotent-replayed" not in first_b.headers
    # B reusing its key with A's body: a 409 that names B's search, never A's
    reused = auth_client.post("/v1/searches", json=tiny, headers={**b, **key})
    problem = assert_problem(reused, 409)
    assert problem["search_id"] == first_b.json()["id"]
    assert first_a.json()["id"] not in reused.text
    replay_a = auth_client.post("/v1/searches", json=tiny, headers={**a, **key})
    assert replay_a.headers["idempotent-replayed"] == "true"
    assert replay_a.json()["id"] == first_a.json()["id"]


def test_missing_unknown_and_revoked_keys_are_401(auth_client: Any) -> None:
    no_key = assert_problem(auth_client.get("/v1/searches"), 401)
    assert no_key["type"].endswith("/unauthorized")
    assert auth_client.get("/v1/searches").headers["www-authenticate"].startswith("Bearer")
    bad = auth_client.get("/v1/searches", headers=bearer("mp_not-a-key"))
    assert_problem(bad, 401)
    assert bad.headers["www-authenticate"].startswith("Bearer")
    key = make_key(auth_client, "team-a", "read")
    assert auth_client.get("/v1/searches", headers=bearer(key["secret"])).status_code == 200
    revoked = auth_client.delete(f"/v1/admin/api-keys/{key['id']}", headers=ADMIN)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert_problem(auth_client.get("/v1/searches", headers=bearer(key["secret"])), 401)
    assert_problem(auth_client.delete("/v1/admin/api-keys/no-such-key", headers=ADMIN), 404)


def test_scopes_read_cannot_write_and_write_cannot_admin(
    auth_client: Any, tiny: dict[str, Any]
) -> None:
    reader = bearer(make_key(auth_client, "team-a", "read")["secret"])
    writer = bearer(make_key(auth_client, "team-a", "write")["secret"])
    assert auth_client.get("/v1/searches", headers=reader).status_code == 200
    denied = assert_problem(auth_client.post("/v1/searches", json=tiny, headers=reader), 403)
    assert denied["required_scope"] == "write"
    assert auth_client.post("/v1/searches", json=tiny, headers=writer).status_code == 202
    assert_problem(auth_client.get("/v1/admin/api-keys", headers=writer), 403)
    made = auth_client.post(
        "/v1/admin/api-keys", json={"tenant": "x", "scopes": ["admin"]}, headers=writer
    )
    assert_problem(made, 403)
    who = auth_client.get("/v1/whoami", headers=writer).json()
    assert who["tenant"] == "team-a" and who["scopes"] == ["read", "write"] and who["auth"]


def test_admin_key_manages_keys_of_every_tenant(auth_client: Any) -> None:
    who = auth_client.get("/v1/whoami", headers=ADMIN).json()
    assert who == {
        "tenant": "admin",
        "scopes": ["read", "write", "admin"],
        "key_id": "bootstrap",
        "auth": True,
    }
    made = make_key(auth_client, "team-z", "admin")
    assert made["scopes"] == ["read", "write", "admin"]  # admin implies the others
    child = bearer(made["secret"])
    other = auth_client.post(
        "/v1/admin/api-keys", json={"tenant": "team-q", "scopes": ["read"]}, headers=child
    )
    assert other.status_code == 201
    listed = auth_client.get("/v1/admin/api-keys", headers=child).json()
    assert {k["tenant"] for k in listed["items"]} == {"team-z", "team-q"}
    assert all("secret" not in k for k in listed["items"])
    assert auth_client.get("/v1/whoami", headers=bearer(ADMIN_SECRET + "x")).status_code == 401
    bad = auth_client.post(
        "/v1/admin/api-keys", json={"tenant": "a b", "scopes": ["root"]}, headers=ADMIN
    )
    assert_problem(bad, 422)


def test_last_used_at_records_use_at_most_once_a_minute(auth_client: Any) -> None:
    from datetime import datetime, timedelta

    from app.db import api_keys
    from app.db.models import ApiKeyRecord

    made = make_key(auth_client, "team-u", "read")
    assert made["last_used_at"] is None
    before = datetime.now(UTC)
    assert auth_client.get("/v1/whoami", headers=bearer(made["secret"])).status_code == 200
    listed = {
        k["id"]: k for k in auth_client.get("/v1/admin/api-keys", headers=ADMIN).json()["items"]
    }
    first = datetime.fromisoformat(listed[made["id"]]["last_used_at"])
    assert before - timedelta(seconds=1) <= first <= datetime.now(UTC)
    engine = auth_client.app.state.engine
    with Session(engine) as session:
        record = session.get(ApiKeyRecord, made["id"])
        assert record is not None
        # within the resolution: no write; a minute later: written once
        assert not api_keys.touch_key(
            session=session, record=record, now=first + timedelta(seconds=30)
        )
        later = first + timedelta(seconds=api_keys.LAST_USED_RESOLUTION_S + 1)
        assert api_keys.touch_key(session=session, record=record, now=later)
        record = session.get(ApiKeyRecord, made["id"], populate_existing=True)
        assert record is not None
        stale = record.model_copy(update={"last_used_at": first})  # another request's view
        assert not api_keys.touch_key(session=session, record=stale, now=later)


def test_only_the_hash_of_a_secret_is_stored(auth_client: Any) -> None:
    made = make_key(auth_client, "team-a", "read")
    engine = auth_client.app.state.engine
    with engine.connect() as connection:
        row = connection.execute(
            text("SELECT key_hash, prefix, scopes FROM api_keys WHERE id = :id"),
            {"id": made["id"]},
        ).one()
    assert row.key_hash == hashlib.sha256(made["secret"].encode()).hexdigest()
    assert made["secret"] not in " ".join(str(v) for v in row)
    assert row.prefix == made["secret"][:10] == made["prefix"]


def test_health_catalog_and_docs_stay_open(auth_client: Any) -> None:
    for path in ("/v1/health", "/v1/hardware", "/v1/model-presets", "/openapi.json", "/docs"):
        assert auth_client.get(path).status_code == 200, path
    spec = auth_client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["ApiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["ApiKey"]["description"],
    }
    assert {"ApiKey": []} in spec["paths"]["/v1/searches"]["post"]["security"]
    assert "security" not in spec["paths"]["/v1/health"]["get"]


def test_auth_off_is_the_default_tenant_with_every_scope(client: Any) -> None:
    who = client.get("/v1/whoami").json()
    assert who == {
        "tenant": "default",
        "scopes": ["read", "write", "admin"],
        "key_id": None,
        "auth": False,
    }


# ---- CLI ------------------------------------------------------------------------------------
def test_cli_keys_create_list_revoke(
    settings_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.cli import cli
    from app.main import create_app

    settings = settings_factory(auth="on")
    monkeypatch.setenv("MESHPLAN_DATABASE_URL", settings.database_url)
    runner = CliRunner()
    made = runner.invoke(cli, ["keys", "create", "--tenant", "lab", "--scope", "write"])
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip().splitlines()[0]
    assert secret.startswith("mp_")
    listed = runner.invoke(cli, ["keys", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    import json

    rows = json.loads(listed.stdout)
    assert [(r["tenant"], r["scopes"], r["revoked_at"]) for r in rows] == [
        ("lab", ["read", "write"], None)
    ]
    with TestClient(create_app(settings)) as client:
        who = client.get("/v1/whoami", headers=bearer(secret)).json()
        assert who["tenant"] == "lab" and who["key_id"] == rows[0]["id"]
        revoked = runner.invoke(cli, ["keys", "revoke", rows[0]["id"]])
        assert revoked.exit_code == 0, revoked.output
        assert_problem(client.get("/v1/whoami", headers=bearer(secret)), 401)
    again = runner.invoke(cli, ["keys", "revoke", rows[0]["id"]])
    assert again.exit_code == 2
    bad = runner.invoke(cli, ["keys", "create", "--tenant", "lab", "--scope", "root"])
    assert bad.exit_code == 2


def test_open_bind_refusal_rules() -> None:
    from app.api.auth import open_bind_refusal
    from app.core.config import Settings

    off = Settings(auth="off")
    for host in ("127.0.0.1", "127.0.0.53", "::1", "[::1]", "localhost"):
        assert open_bind_refusal(off, host) is None, host
    for host in ("0.0.0.0", "::", "10.0.0.5", "example.org"):
        refusal = open_bind_refusal(off, host)
        assert refusal is not None and "MESHPLAN_ALLOW_OPEN" in refusal, host
    assert open_bind_refusal(Settings(auth="off", allow_open=True), "0.0.0.0") is None
    assert open_bind_refusal(Settings(auth="on"), "0.0.0.0") is None


def test_serve_refuses_to_start_open_on_all_interfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    from app.cli import cli

    started: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: started.append(k))
    monkeypatch.delenv("MESHPLAN_AUTH", raising=False)
    monkeypatch.delenv("MESHPLAN_ALLOW_OPEN", raising=False)
    runner = CliRunner()
    refused = runner.invoke(cli, ["serve", "--host", "0.0.0.0"])
    assert refused.exit_code == 2 and started == []
    assert "MESHPLAN_ALLOW_OPEN" in refused.output
    assert runner.invoke(cli, ["serve", "--host", "127.0.0.1"]).exit_code == 0
    monkeypatch.setenv("MESHPLAN_ALLOW_OPEN", "1")
    assert runner.invoke(cli, ["serve", "--host", "0.0.0.0"]).exit_code == 0
    assert [k["host"] for k in started] == ["127.0.0.1", "0.0.0.0"]


def test_client_sends_its_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from meshplan_client import MeshplanClient

    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(
            200, json={"items": [], "total": 0, "limit": 50, "offset": 0, "next_cursor": None}
        )

    monkeypatch.delenv("MESHPLAN_API_KEY", raising=False)
    transport = httpx.MockTransport(handler)
    with MeshplanClient("http://meshplan.test", transport=transport) as mc:
        list(mc.list_searches())
    with MeshplanClient("http://meshplan.test", transport=transport, api_key="mp_abc") as mc:
        list(mc.list_searches())
    monkeypatch.setenv("MESHPLAN_API_KEY", "mp_env")
    with MeshplanClient("http://meshplan.test", transport=transport) as mc:
        list(mc.list_searches())
    assert seen == [None, "Bearer mp_abc", "Bearer mp_env"]


def test_cli_keys_table_fits_80_columns_and_revokes_by_id_prefix(
    settings_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.cli import KEY_ID_SHOWN, cli

    settings = settings_factory(auth="on")
    monkeypatch.setenv("MESHPLAN_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("COLUMNS", "80")
    runner = CliRunner()
    for tenant in ("research-team", "inference-platform"):
        made = runner.invoke(cli, ["keys", "create", "--tenant", tenant, "--scope", "admin"])
        assert made.exit_code == 0, made.output
    import json

    ids = [r["id"] for r in json.loads(runner.invoke(cli, ["keys", "list", "--json"]).stdout)]
    table = runner.invoke(cli, ["keys", "list"]).stdout
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= 80, table
    for key_id in ids:  # each id prefix whole on one line, with its tenant and scope
        row = next(line for line in lines if key_id[:KEY_ID_SHOWN] in line)
        assert "admin" in row
    assert "research-team" in table and "inference-platform" in table
    ambiguous = runner.invoke(cli, ["keys", "revoke", ""])  # the start of every id
    assert ambiguous.exit_code == 2 and "give more of it" in ambiguous.output
    revoked = runner.invoke(cli, ["keys", "revoke", ids[0][:KEY_ID_SHOWN]])
    assert revoked.exit_code == 0, revoked.output
    assert revoked.stdout.strip() == f"revoked {ids[0]}"
    rows = json.loads(runner.invoke(cli, ["keys", "list", "--json"]).stdout)
    assert [r["revoked_at"] is not None for r in rows] == [True, False]
    wide = runner.invoke(cli, ["keys", "list", "--wide"], env={"COLUMNS": "200"}).stdout
    assert all(key_id in wide for key_id in ids)
