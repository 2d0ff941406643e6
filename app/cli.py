"""The `meshplan` command line, a thin shell over `meshplan_client`:

- `serve` runs the API; `migrate` upgrades the database;
- `search` plans a training or serving workload (`--wait`: a progress bar, then the ranked
  plans), `searches` lists searches, `plans SEARCH_ID` shows a search's plans,
  `export PLAN_ID --format F` renders a plan for a launcher, `estimate` prices one plan.

With `--url` (or `$MESHPLAN_URL`) the commands talk to that service. Without it they start
the service in-process for the duration of the command: the app from `app.main.create_app`
under uvicorn in a background thread on a free 127.0.0.1 port (uvicorn runs the lifespan:
migrations and the search runner), over the database of `MESHPLAN_DATABASE_URL` (default
`./var/meshplan.db`), so search and plan ids stay valid for later commands. The in-process
runner uses threads (`MESHPLAN_SEARCH_EXECUTOR` overrides), which start at once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app import cli_tables as tables
from meshplan_client import MeshplanClient, MeshplanError, Plan, Search

cli = typer.Typer(
    name="meshplan",
    help="Plan how large models train and serve on GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)

_CLUSTER_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9_.\- ]*)\s*:\s*(\d+)\s*[xX]\s*(\d+)\s*$")
ERROR_EXIT = 2
"""Exit code of every failure (bad input, unreachable service, failed search)."""
INFEASIBLE_EXIT = 1
"""Exit code of `estimate` when the plan does not fit or cannot run."""
_STARTUP_TIMEOUT_S = 60.0


class CliError(Exception):
    """A clean, user-facing failure (printed without a traceback, exit code 2)."""


# ---- inputs ------------------------------------------------------------------------------
def parse_cluster(value: str) -> dict[str, Any]:
    """`ACCEL:NODESxGPUS` (e.g. `h100-sxm:8x8`) → a cluster JSON body; several node groups
    (a mixed cluster) separated by commas: `h100-sxm:8x8,a100-80gb:8x8`."""
    groups = []
    for part in (p.strip() for p in value.split(",")):
        match = _CLUSTER_RE.match(part)
        if not match:
            raise typer.BadParameter(
                f"{part!r} is not ACCELERATOR:NODESxGPUS_PER_NODE (e.g. h100-sxm:8x8; several "
                "node groups separated by commas)"
            )
        accelerator, nodes, gpus = match.group(1).strip(), int(match.group(2)), int(match.group(3))
        if nodes < 1 or gpus < 1:
            raise typer.BadParameter(f"{part!r}: nodes and GPUs per node must be at least 1")
        groups.append({"accelerator": accelerator, "num_nodes": nodes, "gpus_per_node": gpus})
    return {"node_groups": groups}


def _read_json(value: str, what: str) -> Any:
    """JSON from a file path, or inline JSON text."""
    path = Path(value)
    try:
        if path.is_file() or value.endswith(".json"):
            return json.loads(path.read_text(encoding="utf-8"))
        return json.loads(value)
    except (OSError, json.JSONDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {what} {value!r}: {exc}") from exc


def parse_model(value: str) -> dict[str, Any]:
    """A preset name, or a JSON file: a Hugging Face config.json or an explicit spec."""
    path = Path(value)
    if value.endswith(".json") or path.is_file():
        data = _read_json(value, "model file")
        if not isinstance(data, dict):
            raise typer.BadParameter(f"model file {value!r} must hold a JSON object")
        if "preset" in data or "hf_config" in data:
            return data
        if "model_type" in data or "architectures" in data:
            return {"hf_config": data}
        return data
    return {"preset": value}


def build_workload(
    *,
    serving: bool,
    global_batch: int | None,
    seq: int | None,
    precision: str,
    prompt_tokens: int | None,
    output_tokens: int | None,
    ttft_ms: float | None,
    tpot_ms: float | None,
    percentile: float | None,
    arrival_rate: float | None,
    objective: str | None,
    train_tokens: float | None = None,
    target_tokens_per_s: float | None = None,
    deadline_days: float | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The workload body and the search-level objective from the command-line options.

    Serving (`--serving`, or implied by `--prompt-tokens`/`--output-tokens`) takes the
    objective into the workload (`max_goodput_per_gpu`, `min_gpus`, `min_latency`);
    training passes it at the top level (`max_throughput`, `min_cost`, `min_energy`,
    `min_time_to_train`, `min_gpus`) with the run's `train_tokens`, `target_tokens_per_s` and
    `deadline_days` in the workload."""
    if serving or prompt_tokens is not None or output_tokens is not None:
        if prompt_tokens is None or output_tokens is None:
            raise typer.BadParameter("a serving workload needs --prompt-tokens and --output-tokens")
        slo = {
            k: v
            for k, v in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms), ("percentile", percentile))
            if v is not None
        }
        workload: dict[str, Any] = {
            "kind": "serving",
            "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens,
            "precision": precision,
            "slo": slo,
        }
        if arrival_rate is not None:
            workload["arrival_rate_rps"] = arrival_rate
        if objective is not None:
            workload["objective"] = objective
        return workload, None
    if global_batch is None or seq is None:
        raise typer.BadParameter(
            "a training workload needs --global-batch and --seq "
            "(or --serving with --prompt-tokens and --output-tokens)"
        )
    workload = {
        "kind": "training",
        "global_batch_size": global_batch,
        "sequence_length": seq,
        "precision": precision,
    }
    for name, value in (
        ("train_tokens", train_tokens),
        ("target_tokens_per_s", target_tokens_per_s),
        ("deadline_days", deadline_days),
    ):
        if value is not None:
            workload[name] = value
    return workload, objective


def _plan_body(value: str, client: MeshplanClient) -> dict[str, Any]:
    """`--plan`: a JSON file or inline JSON (a plan, or a stored plan as the API shows it),
    else the id of a stored plan."""
    path = Path(value)
    if path.is_file() or value.endswith(".json") or value.lstrip().startswith("{"):
        data = _read_json(value, "plan")
        if not isinstance(data, dict):
            raise typer.BadParameter(f"plan {value!r} must hold a JSON object")
        if "id" in data and ("parallelism" in data or "instances" in data):
            return Plan.model_validate(data).plan_fields()
        return data
    return client.get_plan(value).plan_fields()


# ---- the service: remote or in-process -----------------------------------------------------
def _local_settings() -> Any:
    from app.core.config import Settings

    overrides: dict[str, Any] = {}
    if "MESHPLAN_SEARCH_EXECUTOR" not in os.environ:
        # a process pool would re-import the app in every worker at every command
        overrides["search_executor"] = "thread"
    return Settings(**overrides)


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*: ")


class _Capture(logging.Handler):
    """Keeps uvicorn's error records as one line each: a logged traceback becomes its
    final `ExceptionType: message` line."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().strip()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text = f"{exc.__class__.__name__}: {exc}"
        elif text.startswith("Traceback"):
            found = [line for line in text.splitlines() if _EXCEPTION_LINE.match(line)]
            text = found[-1] if found else text.splitlines()[-1]
        if not text.startswith("Application startup failed"):
            self.messages.append(text)


@contextmanager
def local_service() -> Iterator[str]:
    """Serve `create_app()` on a free loopback port in a background thread for the block;
    yields its base URL. uvicorn runs the lifespan (migrations, runner, recovery); a
    startup failure becomes a `CliError` naming the cause. The socket is bound before
    uvicorn gets it, so no other process can take the port in between. Warnings of the
    service's loggers are held back (errors still show) while the block runs."""
    import uvicorn

    from app.main import create_app

    app = create_app(_local_settings())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_config=None, log_level="warning", access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    uvicorn_log = logging.getLogger("uvicorn.error")
    capture, propagate = _Capture(), uvicorn_log.propagate
    uvicorn_log.addHandler(capture)
    uvicorn_log.propagate = False  # startup errors are reported once, below, without traces
    # service warnings (e.g. "webhooks are not sent") are noise in a one-shot command
    app_log = logging.getLogger("app")
    app_level = app_log.level
    if app_level == logging.NOTSET:
        app_log.setLevel(logging.ERROR)

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except SystemExit:  # uvicorn exits after a failed startup; the log says why
            pass

    thread = threading.Thread(target=run, name="meshplan-local", daemon=True)
    try:
        thread.start()
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                cause = "; ".join(capture.messages) or "it did not start in time"
                raise CliError(f"the in-process service failed to start: {cause}")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        uvicorn_log.removeHandler(capture)
        uvicorn_log.propagate = propagate
        app_log.setLevel(app_level)


@contextmanager
def connect(url: str | None) -> Iterator[MeshplanClient]:
    """A client of `url`, or of an in-process service when `url` is empty."""
    if url:
        with MeshplanClient(url) as client:
            yield client
        return
    with local_service() as local_url, MeshplanClient(local_url) as client:
        yield client


@contextmanager
def _errors_exit() -> Iterator[None]:
    """Client and CLI errors → one red message on stderr and exit code 2."""
    try:
        yield
    except (MeshplanError, CliError) as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(ERROR_EXIT) from None
    except typer.BadParameter as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(ERROR_EXIT) from None


def _problem_message(problem: dict[str, Any]) -> str:
    lines = [f"{problem.get('title', 'Error')}: {problem.get('detail', '')}"]
    for error in problem.get("errors") or []:
        lines.append(f"  - {error.get('field')}: {error.get('message') or error.get('rule')}")
    return "\n".join(lines)


# ---- rendering (the tables' columns and fitting: app/cli_tables.py) ------------------------
def print_layout(layout: tables.Layout, title: str | None, *, wide: bool) -> None:
    """A fitted table on stdout; `--wide` lets it run past the terminal's width rather than
    squeeze a column."""
    table = tables.build(layout, title)
    if wide and layout.width > console.width:
        Console(width=layout.width, force_terminal=console.is_terminal).print(table)
    else:
        console.print(table)


def _print_plans(plans: list[Plan], title: str, *, show_ids: bool, wide: bool = False) -> None:
    bodies = [p.model_dump(mode="json") for p in plans]
    layout = tables.plans_layout(bodies, console.width, wide=wide, show_ids=show_ids)
    print_layout(layout, title, wide=wide)
    if not wide:
        console.print(tables.details_table(bodies, show_ids=show_ids))


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]searching[/bold]"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} candidates"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )


def _wait(client: MeshplanClient, search: Search, poll_s: float, timeout_s: float | None) -> Search:
    """Wait for the search with a progress bar; Ctrl-C cancels it."""
    try:
        with _progress() as progress:
            task = progress.add_task("search", total=None)

            def report(current: Search) -> None:
                progress.update(
                    task, completed=current.progress.evaluated, total=current.progress.total
                )

            return client.wait_for_search(
                search.id, timeout=timeout_s, poll_interval=poll_s, on_progress=report
            )
    except KeyboardInterrupt:
        try:
            client.cancel_search(search.id)
        except MeshplanError:
            pass
        raise CliError(f"interrupted; search {search.id} cancelled") from None


def _number(value: float) -> str:
    """4 significant digits; large values in full with thousands separators."""
    if isinstance(value, int) or abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _dump(data: Any) -> None:
    """JSON on stdout, no rich markup or wrapping."""
    typer.echo(json.dumps(data, indent=2, default=str))


# ---- commands ----------------------------------------------------------------------------
UrlOption = Annotated[
    str | None,
    typer.Option(
        envvar="MESHPLAN_URL",
        help="A running service ($MESHPLAN_URL); default: run one in-process.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
WideOption = Annotated[
    bool,
    typer.Option(
        "--wide", help="Every column (ids, explanations, more metrics), even past the terminal."
    ),
]


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(help="Uvicorn worker processes.")] = 1,
) -> None:
    """Serve the HTTP API (database from MESHPLAN_DATABASE_URL, default ./var/meshplan.db).

    With MESHPLAN_AUTH=off it refuses a non-loopback --host unless MESHPLAN_ALLOW_OPEN=1."""
    import uvicorn

    from app.api.auth import open_bind_refusal
    from app.core.config import Settings

    refusal = open_bind_refusal(Settings(), host)
    if refusal is not None:
        err_console.print(f"[red]error[/red]: {refusal}", highlight=False)
        raise typer.Exit(ERROR_EXIT)
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
    model: Annotated[
        str, typer.Option(help="Preset name, or a JSON file (HF config.json or an explicit spec).")
    ],
    cluster: Annotated[
        str,
        typer.Option(
            help="ACCELERATOR:NODESxGPUS, e.g. h100-sxm:8x8; a mixed cluster as several, "
            "comma-separated: h100-sxm:8x8,a100-80gb:8x8."
        ),
    ],
    global_batch: Annotated[
        int | None, typer.Option(help="Training: sequences per optimizer step.")
    ] = None,
    seq: Annotated[int | None, typer.Option(help="Training: tokens per sequence.")] = None,
    top_k: Annotated[int, typer.Option(help="Plans to keep.")] = 10,
    precision: Annotated[
        str,
        typer.Option(help="bf16, fp16, fp8 or fp32 (serving: bf16, fp16, fp8 or int4 weights)."),
    ] = "bf16",
    time_limit: Annotated[float | None, typer.Option(help="Search time limit, seconds.")] = None,
    serving: Annotated[
        bool, typer.Option("--serving", help="Plan inference serving instead of training.")
    ] = False,
    prompt_tokens: Annotated[int | None, typer.Option(help="Serving: prompt tokens.")] = None,
    output_tokens: Annotated[int | None, typer.Option(help="Serving: output tokens.")] = None,
    ttft_ms: Annotated[
        float | None, typer.Option(help="Serving SLO: time to first token, ms.")
    ] = None,
    tpot_ms: Annotated[
        float | None, typer.Option(help="Serving SLO: time per output token, ms.")
    ] = None,
    percentile: Annotated[
        float | None, typer.Option(help="Serving SLO percentile (default 90).")
    ] = None,
    arrival_rate: Annotated[
        float | None, typer.Option(help="Serving: requests per second.")
    ] = None,
    objective: Annotated[
        str | None,
        typer.Option(
            help="Training: max_throughput, min_cost, min_energy, min_time_to_train "
            "(--train-tokens) or min_gpus (--target-tokens-per-s, or --train-tokens with "
            "--deadline-days). Serving: max_goodput_per_gpu, min_gpus, min_latency or "
            "min_cost (min_cost needs a price per GPU-hour)."
        ),
    ] = None,
    train_tokens: Annotated[
        float | None, typer.Option(help="Training: tokens of the whole run (e.g. 1.5e13).")
    ] = None,
    target_tokens_per_s: Annotated[
        float | None, typer.Option(help="Training: throughput to reach, tokens/s (min_gpus).")
    ] = None,
    deadline_days: Annotated[
        float | None, typer.Option(help="Training: days the run may take (with --train-tokens).")
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            help="Wait for the plans with a progress bar; "
            "--no-wait prints the search id (needs --url)."
        ),
    ] = True,
    timeout: Annotated[float | None, typer.Option(help="Longest wait, seconds.")] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Idempotency-Key: rerunning with the same key returns the same search."),
    ] = None,
    callback_url: Annotated[
        str | None, typer.Option(help="The service POSTs the finished search to this URL.")
    ] = None,
    url: UrlOption = None,
    output_json: JsonOption = False,
    wide: WideOption = False,
    poll: Annotated[float, typer.Option(help="Seconds between progress reads.")] = 0.5,
) -> None:
    """Search the best parallel plans and print them ranked."""
    with _errors_exit():
        workload, top_objective = build_workload(
            serving=serving,
            global_batch=global_batch,
            seq=seq,
            precision=precision,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            ttft_ms=ttft_ms,
            tpot_ms=tpot_ms,
            percentile=percentile,
            arrival_rate=arrival_rate,
            objective=objective,
            train_tokens=train_tokens,
            target_tokens_per_s=target_tokens_per_s,
            deadline_days=deadline_days,
        )
        constraints = {"time_limit_s": time_limit} if time_limit is not None else None
        body_model, body_cluster = parse_model(model), parse_cluster(cluster)
        if not wait and not url:
            raise CliError(
                "--no-wait needs --url: the in-process service stops when the command ends"
            )
        with connect(url) as client:
            found = client.create_search(
                body_model,
                body_cluster,
                workload,
                constraints=constraints,
                objective=top_objective,
                top_k=top_k,
                idempotency_key=idempotency_key,
                callback_url=callback_url,
            )
            if not wait:
                if output_json:
                    _dump(found.model_dump(mode="json"))
                else:  # the id alone on stdout, for ID=$(meshplan search ... --no-wait)
                    typer.echo(found.id)
                    err_console.print(f"search {found.status}", highlight=False)
                return
            if not found.finished:
                found = _wait(client, found, poll, timeout)
            if found.status == "failed":
                raise CliError(
                    _problem_message(found.error.model_dump(mode="json") if found.error else {})
                )
            if found.status == "cancelled":
                raise CliError(f"search {found.id} was cancelled")
            plans = client.list_plans(found.id, limit=top_k)
    if output_json:
        _dump(
            {
                "search": found.model_dump(mode="json"),
                "plans": [p.model_dump(mode="json") for p in plans],
                "stats": found.stats,
            }
        )
        return
    if not plans:
        err_console.print("[yellow]no plan found[/yellow]")
        raise typer.Exit(ERROR_EXIT)
    if workload["kind"] == "serving":
        title = f"{model} on {cluster}: serving {prompt_tokens} → {output_tokens} tokens"
    else:
        title = f"{model} on {cluster}: {global_batch} × {seq} tokens per step"
    _print_plans(plans, title, show_ids=False, wide=wide)
    stats = found.stats
    wall = stats.get("wall_time_s")
    summary = f"{stats.get('enumerated', '?')} candidates, {stats.get('evaluated', '?')} evaluated"
    if isinstance(wall, int | float):
        summary += f", {wall:.2f} s"
    console.print(summary, style="dim")
    console.print(
        f"search {found.id}; best plan {plans[0].id}", style="dim", highlight=False, soft_wrap=True
    )


@cli.command()
def searches(
    status: Annotated[
        str | None,
        typer.Option(help="Only this status (queued, running, succeeded, failed, cancelled)."),
    ] = None,
    limit: Annotated[int, typer.Option(help="Show at most this many.")] = 20,
    url: UrlOption = None,
    output_json: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """List searches, newest first, with their plan counts."""
    with _errors_exit(), connect(url) as client:
        found = list(
            client.list_searches(status=status, page_size=min(limit, 100), max_items=limit)
        )
    if output_json:
        _dump([s.model_dump(mode="json") for s in found])
        return
    layout = tables.searches_layout(
        [s.model_dump(mode="json") for s in found], console.width, wide=wide
    )
    print_layout(layout, "searches", wide=wide)


@cli.command()
def plans(
    search_id: Annotated[str, typer.Argument(help="The search whose plans to show.")],
    limit: Annotated[int | None, typer.Option(help="Show the best N only.")] = None,
    include_dominated: Annotated[
        bool,
        typer.Option(
            "--include-dominated",
            help="Also show the plans folded under a better plan of the same layout "
            "(column 'under': the rank of that plan).",
        ),
    ] = False,
    url: UrlOption = None,
    output_json: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Show a search's plans, best first, with their ids (the non-dominated ones unless
    --include-dominated)."""
    with _errors_exit(), connect(url) as client:
        found = client.get_search(search_id)
        items = client.list_plans(search_id, limit=limit, include_dominated=include_dominated)
    if output_json:
        _dump([p.model_dump(mode="json") for p in items])
        return
    if not items:
        err_console.print(
            f"[yellow]search {search_id} has no plans ({found.status})[/yellow]", highlight=False
        )
        raise typer.Exit(ERROR_EXIT)
    _print_plans(
        items,
        f"plans of search {search_id} ({found.model_name}, {found.num_gpus} GPUs)",
        show_ids=True,
        wide=wide,
    )


@cli.command()
def export(
    plan_id: Annotated[str, typer.Argument(help="The plan to export.")],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="megatron, torchtitan, deepspeed, vllm, sglang, slurm, kubernetes or trtllm.",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write the file here ('-' or absent: stdout)."),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param", "-p", help="KEY=VALUE query parameters of the export (repeatable)."
        ),
    ] = None,
    url: UrlOption = None,
    output_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the whole export (format, filename, content, args, env)."
        ),
    ] = False,
) -> None:
    """Render a plan for a launcher (Megatron, torchtitan, DeepSpeed, vLLM, SGLang, Slurm,
    Kubernetes)."""
    params: dict[str, str] = {}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            err_console.print(
                f"[red]error:[/red] --param {item!r} is not KEY=VALUE", highlight=False
            )
            raise typer.Exit(ERROR_EXIT)
        params[key] = value
    with _errors_exit(), connect(url) as client:
        rendered = client.export_plan(plan_id, format, **params)
    if output_json:
        _dump(rendered.model_dump(mode="json"))
    elif out is None or str(out) == "-":
        typer.echo(rendered.content, nl=not rendered.content.endswith("\n"))
    else:
        written = rendered.write(out)
        err_console.print(f"wrote {written} ({rendered.format})", highlight=False)


@cli.command()
def estimate(
    model: Annotated[str, typer.Option(help="Preset name, or a JSON file.")],
    cluster: Annotated[
        str,
        typer.Option(
            help="ACCELERATOR:NODESxGPUS, e.g. h100-sxm:8x8; a mixed cluster as several, "
            "comma-separated: h100-sxm:8x8,a100-80gb:8x8."
        ),
    ],
    plan: Annotated[
        str, typer.Option(help="A plan: JSON file, inline JSON, or a stored plan's id.")
    ],
    workload: Annotated[
        str | None,
        typer.Option(
            help="The workload as a JSON file or inline JSON (instead of the options below)."
        ),
    ] = None,
    global_batch: Annotated[int | None, typer.Option(help="Training: sequences per step.")] = None,
    seq: Annotated[int | None, typer.Option(help="Training: tokens per sequence.")] = None,
    precision: Annotated[str, typer.Option(help="Workload precision.")] = "bf16",
    serving: Annotated[bool, typer.Option("--serving", help="A serving workload.")] = False,
    prompt_tokens: Annotated[int | None, typer.Option(help="Serving: prompt tokens.")] = None,
    output_tokens: Annotated[int | None, typer.Option(help="Serving: output tokens.")] = None,
    ttft_ms: Annotated[float | None, typer.Option(help="Serving SLO: TTFT, ms.")] = None,
    tpot_ms: Annotated[float | None, typer.Option(help="Serving SLO: TPOT, ms.")] = None,
    arrival_rate: Annotated[float | None, typer.Option(help="Serving: requests/s.")] = None,
    url: UrlOption = None,
    output_json: JsonOption = False,
) -> None:
    """Price one plan: step time, throughput and memory (serving: latency and goodput).
    Exit code 1 when the plan is infeasible."""
    with _errors_exit():
        if workload is not None:
            body_workload = _read_json(workload, "workload")
            if not isinstance(body_workload, dict):
                raise typer.BadParameter("the workload must be a JSON object")
        else:
            body_workload, _ = build_workload(
                serving=serving,
                global_batch=global_batch,
                seq=seq,
                precision=precision,
                prompt_tokens=prompt_tokens,
                output_tokens=output_tokens,
                ttft_ms=ttft_ms,
                tpot_ms=tpot_ms,
                percentile=None,
                arrival_rate=arrival_rate,
                objective=None,
            )
        body_model, body_cluster = parse_model(model), parse_cluster(cluster)
        with connect(url) as client:
            body_plan = _plan_body(plan, client)
            result = client.estimate(body_model, body_cluster, body_workload, body_plan)
    if output_json:
        _dump(result.model_dump(mode="json"))
    else:
        table = Table(
            title=f"{model} on {cluster}: {'feasible' if result.feasible else 'INFEASIBLE'}"
        )
        table.add_column("metric")
        table.add_column("value", justify="right")
        metrics = result.metrics.model_dump(exclude_none=True) if result.metrics else {}
        for name, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            table.add_row(name, _number(value))
        peak = (result.memory or {}).get("peak_gib")
        if isinstance(peak, int | float) and "peak_memory_gib" not in metrics:
            table.add_row("peak_gib", _number(peak))
        console.print(table)
        for violation in result.violations:
            err_console.print(
                f"[yellow]{violation.kind}[/yellow]: {violation.detail}", highlight=False
            )
        for warning in result.warnings:
            err_console.print(
                f"[yellow]warning {warning.code}[/yellow]: {warning.detail}", highlight=False
            )
    if not result.feasible:
        raise typer.Exit(INFEASIBLE_EXIT)


# ---- API keys (straight on the database of MESHPLAN_DATABASE_URL) ------------------------
keys_cli = typer.Typer(
    help="Make, list and revoke API keys (on the database of MESHPLAN_DATABASE_URL).",
    no_args_is_help=True,
)
cli.add_typer(keys_cli, name="keys")


@contextmanager
def _key_session() -> Iterator[Any]:
    from sqlmodel import Session

    from app.core.config import Settings
    from app.db import migrate as db_migrate
    from app.db.session import make_engine

    engine = make_engine(Settings().database_url)
    try:
        db_migrate.upgrade(engine)  # a fresh database gets its tables first
        with Session(engine, expire_on_commit=False) as session:
            yield session
    finally:
        engine.dispose()


@keys_cli.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="Tenant the key acts for.")],
    scope: Annotated[
        list[str], typer.Option(help="read, write or admin (repeatable; write implies read).")
    ],
    name: Annotated[str | None, typer.Option(help="A label: who or what uses the key.")] = None,
    json_out: JsonOption = False,
) -> None:
    """Make a key and print its secret (shown this once only)."""
    from pydantic import ValidationError

    from app.api.routes.admin import ApiKeyCreate, key_public
    from app.db import api_keys

    try:
        body = ApiKeyCreate.model_validate({"tenant": tenant, "scopes": scope, "name": name})
    except ValidationError as exc:
        err_console.print(f"[red]error[/red]: {exc.errors()[0]['msg']}", highlight=False)
        raise typer.Exit(ERROR_EXIT) from None
    with _key_session() as session:
        record, secret = api_keys.create_key(
            session=session, tenant=body.tenant, scopes=[s.value for s in body.scopes], name=name
        )
    if json_out:
        _dump({**key_public(record), "secret": secret})
        return
    typer.echo(secret)
    err_console.print(
        f"key {record.id} of tenant {record.tenant!r} ({', '.join(record.scopes)}); "
        "the secret above is not shown again",
        highlight=False,
    )


KEY_ID_SHOWN = 8
"""Characters of a key id the keys table shows (`keys revoke` takes any unique prefix)."""


def _minute(value: Any) -> str:
    """An ISO timestamp to the minute (`2026-12-02 18:11`), '' for None."""
    return "" if value is None else str(value).replace("T", " ")[:16]


@keys_cli.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    wide: Annotated[
        bool, typer.Option("--wide", help="Whole ids, names, scopes, prefixes, creation.")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """List keys: id (its first characters), tenant, highest scope, last use, revocation;
    `--wide` adds the whole id, name, every scope, secret prefix and creation time."""
    from app.api.routes.admin import key_public
    from app.db import api_keys

    with _key_session() as session:
        rows = [key_public(r) for r in api_keys.list_keys(session=session, tenant=tenant)]
    if json_out:
        _dump(rows)
        return
    headers = ["id", "tenant", "scope", "last used", "revoked"]
    if wide:
        headers = ["id", "tenant", "name", "scopes", "prefix", "created", "last used", "revoked"]
    table = Table(*headers)
    for column in table.columns:
        column.no_wrap = column.header != "tenant" and column.header != "name"
    for row in rows:
        used, revoked = _minute(row["last_used_at"]), _minute(row["revoked_at"])
        if wide:
            cells = [
                row["id"],
                row["tenant"],
                row["name"] or "",
                ",".join(row["scopes"]),
                row["prefix"],
                _minute(row["created_at"]),
                used,
                revoked,
            ]
        else:
            cells = [row["id"][:KEY_ID_SHOWN], row["tenant"], row["scopes"][-1], used, revoked]
        table.add_row(*cells)
    console.print(table)


@keys_cli.command("revoke")
def keys_revoke(
    key_id: Annotated[
        str, typer.Argument(help="Id of the key, or a unique prefix of it (as `keys list` shows).")
    ],
) -> None:
    """Revoke a key: it answers 401 from the next request on."""
    from app.db import api_keys

    with _key_session() as session:
        matches = [k.id for k in api_keys.list_keys(session=session) if k.id.startswith(key_id)]
        if len(matches) > 1 and key_id not in matches:
            err_console.print(
                f"[red]error[/red]: {key_id!r} is the start of {len(matches)} key ids "
                f"({', '.join(sorted(matches))}); give more of it",
                highlight=False,
            )
            raise typer.Exit(ERROR_EXIT)
        full = key_id if key_id in matches or not matches else matches[0]
        if not api_keys.revoke_key(session=session, key_id=full):
            known = api_keys.get_key(session=session, key_id=full) is not None
            err_console.print(
                f"[red]error[/red]: key {full} is {'already revoked' if known else 'unknown'}",
                highlight=False,
            )
            raise typer.Exit(ERROR_EXIT)
    typer.echo(f"revoked {full}")


def main() -> None:
    """Entry point of the `meshplan` script."""
    cli()


if __name__ == "__main__":
    main()
