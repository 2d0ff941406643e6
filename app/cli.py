"""The `meshplan` command line: `serve` runs the API; `search` plans a model on a cluster and
prints the ranked plans, in-process (no server needed) or against a running service (`--url`).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

cli = typer.Typer(
    name="meshplan",
    help="Plan how large models train on GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)

_CLUSTER_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9_.\- ]*)\s*:\s*(\d+)\s*[xX]\s*(\d+)\s*$")
ERROR_EXIT = 2


class CliError(Exception):
    """A clean, user-facing failure (printed without a traceback, exit code 2)."""


def parse_cluster(value: str) -> dict[str, Any]:
    """`ACCEL:NODESxGPUS` (e.g. `h100-sxm:8x8`) → a cluster JSON body."""
    match = _CLUSTER_RE.match(value)
    if not match:
        raise typer.BadParameter(
            f"{value!r} is not ACCELERATOR:NODESxGPUS_PER_NODE (e.g. h100-sxm:8x8)"
        )
    accelerator, nodes, gpus = match.group(1).strip(), int(match.group(2)), int(match.group(3))
    if nodes < 1 or gpus < 1:
        raise typer.BadParameter(f"{value!r}: nodes and GPUs per node must be at least 1")
    return {"node_groups": [{"accelerator": accelerator, "num_nodes": nodes,
                             "gpus_per_node": gpus}]}


def parse_model(value: str) -> dict[str, Any]:
    """A preset name, or a JSON file: a Hugging Face config.json or an explicit spec."""
    path = Path(value)
    if value.endswith(".json") or path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise typer.BadParameter(f"cannot read model file {value!r}: {exc}") from exc
        if not isinstance(data, dict):
            raise typer.BadParameter(f"model file {value!r} must hold a JSON object")
        if "preset" in data or "hf_config" in data:
            return data
        if "model_type" in data or "architectures" in data:
            return {"hf_config": data}
        return data
    return {"preset": value}


def _problem_message(problem: dict[str, Any]) -> str:
    lines = [f"{problem.get('title', 'Error')}: {problem.get('detail', '')}"]
    for error in problem.get("errors") or []:
        lines.append(f"  - {error.get('field')}: {error.get('message') or error.get('rule')}")
    return "\n".join(lines)


# ---- rendering ---------------------------------------------------------------------------
def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plans_table(plans: list[dict[str, Any]], title: str, width: int = 160) -> Table:
    """The ranked plans as a rich table (the explanation column shrinks to fit)."""
    headers = ("rank", "dp/tp/pp/vp/cp", "mbs", "zero", "recompute", "step s", "tokens/s",
               "MFU", "peak GiB", "explanation")
    rows = []
    for plan in plans:
        par = plan["parallelism"]
        metrics = plan["metrics"]
        degrees = "/".join(str(par[k]) for k in ("data", "tensor", "pipeline",
                                                  "virtual_pipeline", "context"))
        if par.get("expert", 1) > 1:
            degrees += f" ep{par['expert']}"
        rows.append((
            str(plan["rank"]), degrees, str(plan["micro_batch_size"]), str(plan["zero_stage"]),
            plan["recompute"], f"{metrics['step_time_s']:.4g}", f"{metrics['tokens_per_s']:,.0f}",
            f"{metrics['mfu'] * 100:.1f}%", f"{plan['memory']['peak_gib']:.1f}",
            # the first clause repeats step time and MFU: show what follows it
            plan.get("explanation", "").split("; ", 1)[-1],
        ))
    widths = [max([len(name), *(len(row[i]) for row in rows)]) for i, name in enumerate(headers)]
    # each column takes its width plus 3 (padding and border); the explanation gets the rest
    room = max(len(headers[-1]), min(80, width - sum(w + 3 for w in widths[:-1]) - 4))
    table = Table(title=title)
    for name in headers:
        justify = "left" if name in ("dp/tp/pp/vp/cp", "recompute", "explanation") else "right"
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row[:-1], _truncate(row[-1], room))
    return table


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]searching[/bold]"), BarColumn(),
        TextColumn("{task.completed}/{task.total} candidates"), TimeElapsedColumn(),
        console=err_console, transient=True,
    )


# ---- search modes ------------------------------------------------------------------------
def _search_in_process(body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from pydantic import ValidationError

    from app.core.config import Settings
    from app.core.problems import problem_from_error
    from app.schemas import SearchCreate
    from app.services import planning
    from specs.errors import PlannerError

    try:
        request = SearchCreate.model_validate(body)
        prepared = planning.prepare_search(request, Settings())
    except ValidationError as exc:
        errors = planning.validation_errors(exc, "")
        raise CliError(
            "Invalid input:\n" + "\n".join(f"  - {e['field'].strip('.')}: {e['message']}"
                                           for e in errors)
        ) from exc
    except PlannerError as exc:
        raise CliError(_problem_message(problem_from_error(exc))) from exc
    with _progress() as progress:
        task = progress.add_task("search", total=None)

        def report(evaluated: int, total: int | None) -> None:
            progress.update(task, completed=evaluated, total=total)

        try:
            outcome = planning.run_problem(prepared.problem, progress=report,
                                           should_stop=lambda: False)
        except PlannerError as exc:
            raise CliError(_problem_message(problem_from_error(exc))) from exc
    plans = [planning.plan_public(p, plan_id=str(p["rank"]), search_id="local")
             for p in outcome.plans]
    return plans, outcome.stats


def _search_remote(url: str, body: dict[str, Any], poll_s: float) -> tuple[
    list[dict[str, Any]], dict[str, Any]
]:
    with httpx.Client(base_url=url.rstrip("/"), timeout=30.0) as client:
        try:
            response = client.post("/v1/searches", json=body)
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach {url}: {exc}") from exc
        if response.status_code >= 400:
            raise CliError(_remote_error(response))
        search = response.json()
        location = response.headers.get("location") or f"/v1/searches/{search['id']}"
        try:
            with _progress() as progress:
                task = progress.add_task("search", total=None)
                while search["status"] in ("queued", "running"):
                    time.sleep(poll_s)
                    response = client.get(location)
                    if response.status_code >= 400:
                        raise CliError(_remote_error(response))
                    search = response.json()
                    done = search["progress"]
                    progress.update(task, completed=done["evaluated"], total=done["total"])
        except KeyboardInterrupt:
            client.delete(location)
            raise CliError(f"interrupted; search {search['id']} cancelled") from None
        if search["status"] == "failed":
            raise CliError(_problem_message(search.get("error") or {}))
        if search["status"] == "cancelled":
            raise CliError(f"search {search['id']} was cancelled")
        response = client.get(f"{location}/plans", params={"limit": search.get("top_k", 100)})
        if response.status_code >= 400:
            raise CliError(_remote_error(response))
        return response.json()["items"], search.get("stats") or {}


def _remote_error(response: httpx.Response) -> str:
    try:
        return _problem_message(response.json())
    except (ValueError, AttributeError):
        return f"HTTP {response.status_code}: {response.text[:500]}"


# ---- commands ----------------------------------------------------------------------------
@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(help="Uvicorn worker processes.")] = 1,
) -> None:
    """Serve the HTTP API (database from MESHPLAN_DATABASE_URL, default ./var/meshplan.db)."""
    import uvicorn

    uvicorn.run("app.main:app", host=host, port=port, workers=workers)


@cli.command()
def migrate() -> None:
    """Migrate the database to the latest schema (`alembic upgrade head`)."""
    from app.core.config import Settings
    from app.db import migrate as db_migrate
    from app.db.session import make_engine

    settings = Settings()
    engine = make_engine(settings.database_url)
    try:
        db_migrate.upgrade(engine)
    finally:
        engine.dispose()
    console.print(f"database at {settings.database_kind} is up to date")


@cli.command()
def search(
    model: Annotated[str, typer.Option(help="Preset name, or a JSON file (HF config.json or "
                                            "an explicit spec).")],
    cluster: Annotated[str, typer.Option(help="ACCELERATOR:NODESxGPUS, e.g. h100-sxm:8x8.")],
    global_batch: Annotated[int, typer.Option(help="Sequences per optimizer step.")],
    seq: Annotated[int, typer.Option(help="Tokens per sequence.")],
    top_k: Annotated[int, typer.Option(help="Plans to keep.")] = 10,
    precision: Annotated[str, typer.Option(help="bf16, fp16, fp8 or fp32.")] = "bf16",
    time_limit: Annotated[float | None, typer.Option(help="Search time limit, seconds.")] = None,
    url: Annotated[str | None, typer.Option(help="A running service; default: in-process.")] = None,
    output_json: Annotated[bool, typer.Option("--json", help="Print the plans as JSON.")] = False,
    poll: Annotated[float, typer.Option(help="Seconds between polls (with --url).")] = 0.5,
) -> None:
    """Search the best parallel plans and print them ranked."""
    body: dict[str, Any] = {
        "model": parse_model(model),
        "cluster": parse_cluster(cluster),
        "workload": {"kind": "training", "global_batch_size": global_batch,
                     "sequence_length": seq, "precision": precision},
        "top_k": top_k,
    }
    if time_limit is not None:
        body["constraints"] = {"time_limit_s": time_limit}
    try:
        plans, stats = _search_remote(url, body, poll) if url else _search_in_process(body)
    except CliError as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(ERROR_EXIT) from None
    if output_json:
        console.print_json(json.dumps({"plans": plans, "stats": stats}))
        return
    if not plans:
        err_console.print("[yellow]no plan found[/yellow]")
        raise typer.Exit(ERROR_EXIT)
    title = f"{model} on {cluster}: {global_batch} × {seq} tokens per step"
    console.print(plans_table(plans, title, width=console.width))
    wall = stats.get("wall_time_s")
    summary = f"{stats.get('enumerated', '?')} candidates, {stats.get('evaluated', '?')} evaluated"
    if isinstance(wall, int | float):
        summary += f", {wall:.2f} s"
    console.print(summary, style="dim")


def main() -> None:
    """Entry point of the `meshplan` script."""
    cli()


if __name__ == "__main__":
    main()
