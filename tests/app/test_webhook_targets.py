"""The SSRF rules of webhook callback URLs (`app.services.webhook_targets`): every spelling
of a non-public address is a 422 at submission, an allow-listed host is delivered to, a name
that resolves to loopback at send time is refused at delivery, and the connection goes to
the address that was checked (no second DNS lookup)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from app_support import assert_problem
from fastapi.testclient import TestClient
from test_scheduler_api import (
    FAILURE_BODY,
    LiveServer,
    Receiver,
    deliveries_settled,
    server_settings,
    small,
)

from app.main import create_app
from app.services import webhook_targets
from app.services.webhook_targets import RefusedTarget, check_callback_url, pin_target

PUBLIC = ipaddress.ip_address("93.184.216.34")

NON_PUBLIC_HOSTS = [
    "127.0.0.1",
    "127.0.0.1.",
    "0x7f000001",
    "0X7F000001",
    "2130706433",
    "0177.0.0.1",
    "127.1",
    "0x7f.1",
    "0",
    "0.0.0.0",
    "[::1]",
    "[::]",
    "[::ffff:127.0.0.1]",
    "[::FFFF:7F00:1]",
    "[::ffff:8.8.8.8]",  # IPv4-mapped: refused outright
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "100.64.0.1",
    "169.254.169.254",
    "[fe80::1]",
    "[FC00::1]",
    "[fd12:3456::1]",
    "224.0.0.1",
    "[ff02::1]",
    "[ff0e::1]",
    "240.0.0.1",
    "255.255.255.255",
    "[2002:7f00:1::]",  # 6to4 of 127.0.0.1
    "[64:ff9b::a9fe:a9fe]",  # NAT64 of 169.254.169.254
    "localhost",  # a name: resolves to loopback
    "LOCALHOST.",
]


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Names → addresses the resolver answers (an unknown name does not resolve); records
    every lookup in `table["lookups"]`."""
    table: dict[str, list[Any]] = {
        "localhost": [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")],
        "hooks.example.com": [PUBLIC],
        "lookups": [],
    }

    def resolve(host: str, port: int) -> list[Any]:
        table["lookups"].append(host)
        if host not in table:
            raise OSError("Name or service not known")
        answers = table[host]
        if host in table.get("rebind", []) and table["lookups"].count(host) > 1:
            return [ipaddress.ip_address("127.0.0.1")]  # every lookup after the first
        return list(answers)

    monkeypatch.setattr(webhook_targets, "resolve_addresses", resolve)
    return table


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = server_settings(tmp_path_factory.mktemp("targets") / "m.db", webhook_allow_hosts=[])
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.mark.parametrize("host", NON_PUBLIC_HOSTS)
def test_every_spelling_of_a_non_public_address_is_a_422(
    client: TestClient, fake_dns: dict[str, list[Any]], host: str
) -> None:
    for scheme in ("http", "https"):
        url = f"{scheme}://{host}:8080/admin/hook"
        problem = assert_problem(client.post("/v1/searches", json=small(callback_url=url)), 422)
        [error] = problem["errors"]
        assert error["field"] == "callback_url"
        assert error["rule"] == "public-address-required", problem
        assert error["value"] == url


def test_https_is_required_unless_http_is_allowed(fake_dns: dict[str, list[Any]]) -> None:
    strict = server_settings(Path("unused.db"), webhook_allow_http=False, webhook_allow_hosts=[])
    check_callback_url("https://hooks.example.com/x", strict)
    with pytest.raises(RefusedTarget) as refused:
        check_callback_url("http://hooks.example.com/x", strict)
    assert refused.value.rule == "https-required"
    lax = strict.model_copy(update={"webhook_allow_http": True})
    check_callback_url("http://hooks.example.com/x", lax)


def test_unresolvable_hosts_are_refused(fake_dns: dict[str, list[Any]]) -> None:
    settings = server_settings(Path("unused.db"), webhook_allow_hosts=[])
    with pytest.raises(RefusedTarget) as refused:
        check_callback_url("https://nowhere.invalid/x", settings)
    assert refused.value.rule == "host-unresolvable"


def test_a_name_with_one_private_address_among_public_ones_is_refused(
    fake_dns: dict[str, list[Any]],
) -> None:
    fake_dns["mixed.example.com"] = [PUBLIC, ipaddress.ip_address("10.1.2.3")]
    settings = server_settings(Path("unused.db"), webhook_allow_hosts=[])
    with pytest.raises(RefusedTarget, match="10.1.2.3"):
        check_callback_url("https://mixed.example.com/x", settings)


def test_the_allow_list_matches_names_and_addresses(fake_dns: dict[str, list[Any]]) -> None:
    settings = server_settings(
        Path("unused.db"), webhook_allow_hosts=["Hooks.Internal.", "127.0.0.1"]
    )
    check_callback_url("https://hooks.internal/x", settings)  # not even resolved
    check_callback_url("http://0x7f000001:9/x", settings)  # the same address, spelt otherwise
    assert fake_dns["lookups"] == []
    with pytest.raises(RefusedTarget):
        check_callback_url("http://127.0.0.2/x", settings)


def test_a_delivery_is_pinned_to_the_checked_address(fake_dns: dict[str, list[Any]]) -> None:
    settings = server_settings(Path("unused.db"), webhook_allow_hosts=[])
    target = pin_target("https://hooks.example.com:8443/a/b?c=1", settings)
    assert target.url == "https://93.184.216.34:8443/a/b?c=1"
    assert target.headers == {"Host": "hooks.example.com:8443"}
    assert target.extensions == {"sni_hostname": "hooks.example.com"}
    fake_dns["six.example.com"] = [ipaddress.ip_address("2606:2800:220:1::1")]
    assert pin_target("https://six.example.com/h", settings).url == "https://[2606:2800:220:1::1]/h"


def test_a_name_rebound_to_loopback_is_refused_at_delivery(
    tmp_path: Path, fake_dns: dict[str, list[Any]]
) -> None:
    hooks = Receiver()
    try:
        settings = server_settings(
            tmp_path / "m.db", webhook_allow_hosts=[], webhook_max_attempts=2
        )
        with LiveServer(settings) as server:
            port = hooks.httpd.server_address[1]
            url = f"http://hooks.example.com:{port}/hooks/rebound"
            fake_dns["rebind"] = ["hooks.example.com"]  # loopback from the second lookup on
            created = server.client.post(
                "/v1/searches?wait=20",
                json=small(constraints={"time_limit_s": 23}, callback_url=url),
            )
            assert created.status_code == 201, created.text  # public at submission
            [delivery] = deliveries_settled(server.client, created.json()["id"])
        assert delivery["status"] == "failed"
        assert [a["status_code"] for a in delivery["attempts"]] == [None, None]
        for attempt in delivery["attempts"]:
            assert attempt["error"].startswith("refused (public-address-required)"), attempt
            assert "127.0.0.1" in attempt["error"]
        assert hooks.received("rebound") == []  # nothing reached the loopback receiver
    finally:
        hooks.close()


def test_a_failing_receivers_body_appears_nowhere(tmp_path: Path) -> None:
    hooks = Receiver()
    try:
        settings = server_settings(tmp_path / "m.db", webhook_max_attempts=2)
        with LiveServer(settings) as server:
            url = hooks.url("secret", fail=5)  # allow-listed loopback, answers 500 + body
            created = server.client.post(
                "/v1/searches?wait=20",
                json=small(constraints={"time_limit_s": 24}, callback_url=url),
            )
            search_id = created.json()["id"]
            [delivery] = deliveries_settled(server.client, search_id)
            assert [a["status_code"] for a in delivery["attempts"]] == [500, 500]
            assert [a["error"] for a in delivery["attempts"]] == ["HTTP 500", "HTTP 500"]
            secret = FAILURE_BODY.decode()
            for path in (
                f"/v1/searches/{search_id}",
                f"/v1/searches/{search_id}/deliveries",
                "/v1/searches",
            ):
                assert secret not in server.client.get(path).text
        assert len(hooks.received("secret")) == 2
    finally:
        hooks.close()
