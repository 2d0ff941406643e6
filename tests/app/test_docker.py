"""docker/: the image and the compose file (two API replicas on one PostgreSQL, a Ray head
and a Ray worker) are consistent (issue 13, point 7). `docker compose config` runs when a
compose is installed; the YAML checks run everywhere."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"
COMPOSE = DOCKER / "compose.yaml"


def _compose_command() -> list[str] | None:
    """`docker compose` (v2 plugin) or `docker-compose`, whichever works here."""
    if shutil.which("docker"):
        probe = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_config_is_valid() -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    result = subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def _flag(command: list[str], name: str) -> str:
    for part in command:
        if part.startswith(f"--{name}="):
            return part.split("=", 1)[1]
    raise AssertionError(f"--{name} not in {command}")


def test_compose_services_share_one_database_and_ray() -> None:
    services = _compose()["services"]
    assert set(services) == {"db", "ray-head", "ray-worker", "app-1", "app-2"}
    apps = [services["app-1"], services["app-2"]]
    urls = {app["environment"]["MESHPLAN_DATABASE_URL"] for app in apps}
    assert len(urls) == 1, urls  # both replicas on one database
    db_url = urlsplit(urls.pop())
    assert db_url.scheme == "postgresql+psycopg"
    assert db_url.hostname == "db" and db_url.port == 5432
    db_env = services["db"]["environment"]
    assert db_url.username == db_env["POSTGRES_USER"]
    assert db_url.password == db_env["POSTGRES_PASSWORD"]
    assert db_url.path.lstrip("/") == db_env["POSTGRES_DB"]
    head_command = services["ray-head"]["command"]
    assert "--head" in head_command
    for app in apps:
        env = app["environment"]
        assert env["MESHPLAN_EXECUTOR"] == "ray"
        ray = urlsplit(env["RAY_ADDRESS"])
        assert ray.scheme == "ray" and ray.hostname == "ray-head"
        assert str(ray.port) == _flag(head_command, "ray-client-server-port")
        assert set(app["depends_on"]) == {"db", "ray-head"}
    worker_address = _flag(services["ray-worker"]["command"], "address")
    assert worker_address == f"ray-head:{_flag(head_command, 'port')}"


def test_compose_images_and_ports_are_consistent() -> None:
    services = _compose()["services"]
    ours = [services[name] for name in ("app-1", "app-2", "ray-head", "ray-worker")]
    # one image for the API and the Ray nodes: the same Ray and meshplan on both sides
    assert len({s["image"] for s in ours}) == 1
    assert len({yaml.safe_dump(s["build"]) for s in ours}) == 1
    assert ours[0]["build"]["dockerfile"] == "docker/Dockerfile"
    dockerfile = (DOCKER / "Dockerfile").read_text()
    exposed = re.search(r"^EXPOSE (\d+)$", dockerfile, re.M)
    assert exposed is not None
    host_ports = []
    for name in ("app-1", "app-2"):
        (mapping,) = services[name]["ports"]
        host, host_port, container_port = mapping.rsplit(":", 2)
        assert host == "127.0.0.1"
        assert container_port == exposed.group(1)
        host_ports.append(host_port)
    assert len(set(host_ports)) == 2
    assert f'--port", "{exposed.group(1)}"' in dockerfile  # uvicorn listens there


def test_image_runs_as_non_root_with_a_liveness_healthcheck() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    users = re.findall(r"^USER (\S+)$", dockerfile, re.M)
    assert users and users[-1] not in ("root", "0")
    assert "\nHEALTHCHECK " in dockerfile
    healthcheck = dockerfile.split("\nHEALTHCHECK ", 1)[1].split("\nCMD ", 1)[0]
    assert "http://127.0.0.1:8000/v1/health'" in healthcheck  # liveness, not readiness
