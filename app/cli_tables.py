"""The `meshplan` command line's tables, laid out for the terminal they print on.

Each table is a list of `Column`s. A numeric column is right-aligned and never wrapped or
cut: it is exactly as wide as its widest value (or its header). A text column (a layout, a
model name, an explanation) wraps at spaces, and folds a word that does not fit onto the
next line instead of cutting it. Before a table is built the columns are fitted to the
width: while the narrowest rendering of the shown columns is wider than the terminal, the
column of lowest `priority` is hidden (the table's caption names the hidden ones and
`--wide`). Columns marked `wide` (ids, the explanation, the other percentiles) appear only
with `--wide`; the ids and explanations are then printed in a second, two-column table
under the first (`details_table`) so that they stay whole at any width.

Widths are rich's cell widths (`rich.cells.cell_len`), what the table itself measures. A
rich table takes 3 characters per column (a border and a space either side) plus 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.table import Table

BORDER_PER_COLUMN = 3
"""A rich table's border and padding per column (`│ x `), plus one closing border."""
TEXT_MIN_WIDTH = 10
"""The narrowest a text column is laid out (its header, when longer, wins)."""
WORD_MAX = 20
"""A text column makes room for words up to this long (model names, `3×decode`)."""
WIDE_TEXT_WIDTH = 60
"""With `--wide`, a text column is at least this wide (or its natural width)."""
KEEP = 100
"""Priority of a column that is never hidden."""


@dataclass(frozen=True)
class Column:
    header: str
    """The header; a line break keeps a unit under its name (`TTFT p90\nms`)."""
    cell: Callable[[dict[str, Any]], str]
    numeric: bool = True
    """Right-aligned, never wrapped or cut."""
    wrap: bool = True
    """A text column that may wrap (an id does not: it is copied whole)."""
    priority: int = KEEP
    """Narrow terminals hide the lowest first (`KEEP`: never)."""
    wide: bool = False
    """Shown only with `--wide`."""


@dataclass
class Layout:
    """The columns a table shows at a width, and those it hides."""

    columns: list[Column]
    cells: list[list[str]]
    widths: list[int]
    """Each shown column's content width (padding and borders excluded)."""
    hidden: list[str]
    width: int
    """The whole table's width."""


def number(value: Any) -> str:
    """A figure for a table: integers and values from 10,000 up in full with thousands
    separators; others to 4 significant digits, never in exponent notation."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or abs(value) >= 10_000:
        return f"{value:,.0f}"
    if value == 0 or abs(value) >= 1e-3:
        return f"{value:.4g}"
    return f"{value:.2e}"


def wraps(column: Column) -> bool:
    return column.wrap and not column.numeric


def natural_width(column: Column, values: Sequence[str]) -> int:
    """The width of the column's longest line (header or value) unwrapped."""
    header = max(cell_len(line) for line in column.header.splitlines())
    return max([header, *(cell_len(v) for v in values)])


def column_width(column: Column, values: Sequence[str]) -> int:
    """The narrowest a column renders without cutting anything it must keep whole: the
    natural width for a column that does not wrap; else room for its header and its longest
    word (a word longer than `WORD_MAX` folds onto the next line), at least `TEXT_MIN_WIDTH`
    unless everything in it is shorter."""
    natural = natural_width(column, values)
    if not wraps(column):
        return natural
    header = max(cell_len(line) for line in column.header.splitlines())
    word = max([0, *(cell_len(w) for v in values for w in v.split())])
    return max(header, min(natural, max(min(word, WORD_MAX), TEXT_MIN_WIDTH)))


def fit(
    columns: Sequence[Column], rows: Sequence[dict[str, Any]], width: int, *, wide: bool
) -> Layout:
    """The columns to show at `width` (all of them with `wide`), with their cells."""
    shown = [c for c in columns if wide or not c.wide]
    cells = {c.header: [c.cell(r) for r in rows] for c in shown}
    widths = {c.header: column_width(c, cells[c.header]) for c in shown}
    hidden: list[str] = []
    if wide:  # past the terminal anyway: text columns get a readable width
        for column in shown:
            if wraps(column):
                natural = natural_width(column, cells[column.header])
                widths[column.header] = max(widths[column.header], min(natural, WIDE_TEXT_WIDTH))

    def total() -> int:
        return sum(widths[c.header] + BORDER_PER_COLUMN for c in shown) + 1

    while not wide and total() > width:
        droppable = [c for c in shown if c.priority < KEEP]
        if not droppable:
            break
        lowest = min(droppable, key=lambda c: c.priority)
        shown.remove(lowest)
        hidden.append(lowest.header)
    # the room left goes to the wrapping columns, each up to its natural width, in order
    room = max(0, width - total())
    for column in shown:
        if wraps(column) and room > 0:
            grow = min(room, natural_width(column, cells[column.header]) - widths[column.header])
            widths[column.header] += max(0, grow)
            room -= max(0, grow)
    return Layout(
        shown,
        [cells[c.header] for c in shown],
        [widths[c.header] for c in shown],
        [c.header.replace("\n", " ") for c in columns if c.header in hidden],
        total(),
    )


def build(layout: Layout, title: str | None) -> Table:
    """A rich table of the layout (numbers whole; text wrapped, never cut)."""
    caption = None
    if layout.hidden:
        caption = f"hidden at this width: {', '.join(layout.hidden)} (--wide shows them)"
    table = Table(title=title, caption=caption)
    for column, width in zip(layout.columns, layout.widths, strict=True):
        # a fixed width: rich never narrows a column below what `fit` measured
        table.add_column(
            column.header,
            justify="right" if column.numeric else "left",
            no_wrap=not wraps(column),
            overflow="fold",
            width=width,
        )
    for i in range(len(layout.cells[0]) if layout.cells else 0):
        table.add_row(*(values[i] for values in layout.cells))
    return table


# ---- plans -------------------------------------------------------------------------------
def explanation(plan: dict[str, Any]) -> str:
    """The plan's explanation after its first clause (which repeats the headline metrics)."""
    return str(plan.get("explanation", "")).split("; ", 1)[-1]


def _degrees(plan: dict[str, Any]) -> str:
    par = plan["parallelism"]
    text = "/".join(
        str(par.get(k, 1)) for k in ("data", "tensor", "pipeline", "virtual_pipeline", "context")
    )
    if par.get("expert", 1) > 1:
        text += f" ep{par['expert']}"
    return text


def _metric(name: str) -> Callable[[dict[str, Any]], str]:
    def cell(plan: dict[str, Any]) -> str:
        return number((plan.get("metrics") or {}).get(name))

    return cell


def _peak_gib(plan: dict[str, Any]) -> str:
    peak = (plan.get("memory") or {}).get("peak_gib")
    return f"{peak:.1f}" if isinstance(peak, int | float) else ""


def _percent(name: str) -> Callable[[dict[str, Any]], str]:
    def cell(plan: dict[str, Any]) -> str:
        value = (plan.get("metrics") or {}).get(name)
        return f"{value * 100:.1f}%" if isinstance(value, int | float) else ""

    return cell


def _tokens_per_s(plan: dict[str, Any]) -> str:
    value = (plan.get("metrics") or {}).get("tokens_per_s")
    return f"{value:,.0f}" if isinstance(value, int | float) else ""


def _id_column() -> Column:
    return Column("id", lambda p: str(p["id"]), numeric=False, wrap=False, wide=True)


def _explanation_column() -> Column:
    return Column("explanation", explanation, numeric=False, wide=True)


TRAINING_COLUMNS: tuple[Column, ...] = (
    Column("rank", lambda p: str(p["rank"])),
    Column("dp/tp/pp/vp/cp", _degrees, numeric=False, wrap=False),
    Column("mbs", lambda p: str(p.get("micro_batch_size", "")), priority=20),
    Column("zero", lambda p: str(p.get("zero_stage", "")), priority=10),
    Column(
        "recompute", lambda p: str(p.get("recompute", "")), numeric=False, wrap=False, priority=30
    ),
    Column("schedule", lambda p: str(p.get("pipeline_schedule", "")), numeric=False, wide=True),
    Column("step s", _metric("step_time_s")),
    Column("tokens/s", _tokens_per_s),
    Column("MFU", _percent("mfu")),
    Column("peak GiB", _peak_gib),
    Column("bubble", _percent("bubble_fraction"), wide=True),
)
"""A training plan's columns, most useful first (headers are what the tables print)."""


def _instance_text(instance: dict[str, Any]) -> str:
    par = instance.get("parallelism") or {}
    text = f"{instance.get('count', 1)}×{instance.get('role', 'both')} tp{par.get('tensor', 1)}"
    if par.get("pipeline", 1) > 1:
        text += f" pp{par['pipeline']}"
    if par.get("expert", 1) > 1:
        text += f" ep{par['expert']}"
    text += f" b{instance.get('max_batch_size')}"
    if instance.get("precision"):
        text += f" {instance['precision']}"
    return text


def serving_layout(plan: dict[str, Any]) -> str:
    """The instances of a serving plan in a few words (`2×both tp4 b112`)."""
    text = ", ".join(_instance_text(i) for i in plan.get("instances") or [])
    return "disagg " + text if plan.get("mode") == "disaggregated" else text


SERVING_COLUMNS: tuple[Column, ...] = (
    Column("rank", lambda p: str(p["rank"])),
    Column("layout", serving_layout, numeric=False),
    Column("GPUs", _metric("gpus_used")),
    Column("goodput\nrps", _metric("goodput_rps")),
    Column("rps/GPU", _metric("goodput_rps_per_gpu")),
    Column("TTFT p90\nms", _metric("ttft_ms_p90"), priority=40),
    Column("TPOT p90\nms", _metric("tpot_ms_p90"), priority=30),
    Column("tokens/s", _metric("throughput_tokens_per_s"), priority=10),
    Column("engine", lambda p: str(p.get("engine") or ""), numeric=False, wide=True),
    Column("TTFT p99\nms", _metric("ttft_ms_p99"), wide=True),
    Column("TPOT p99\nms", _metric("tpot_ms_p99"), wide=True),
    Column("KV GiB", _metric("kv_cache_gib"), wide=True),
)
"""A serving plan's columns, most useful first."""


def _under_column(plans: Sequence[dict[str, Any]]) -> Column:
    """'#3' for a plan folded under the plan ranked 3 in the same table (its id when that
    plan is not in the table), empty for a non-dominated one."""
    rank_of = {p.get("id"): p.get("rank") for p in plans}

    def cell(plan: dict[str, Any]) -> str:
        by = plan.get("dominated_by")
        if by is None:
            return ""
        return f"#{rank_of[by]}" if rank_of.get(by) is not None else str(by)

    return Column("under", cell, numeric=False, wrap=False)


def plan_columns(
    serving: bool, *, show_ids: bool, plans: Sequence[dict[str, Any]] = ()
) -> list[Column]:
    """The columns of a plan table; with `plans` of which some are folded under another
    (`dominated_by`), an `under` column after the rank."""
    base = list(SERVING_COLUMNS if serving else TRAINING_COLUMNS)
    if any(p.get("dominated_by") is not None for p in plans):
        base.insert(1, _under_column(plans))
    return (
        [_id_column(), *base, _explanation_column()]
        if show_ids
        else [
            *base,
            _explanation_column(),
        ]
    )


def is_serving(plan: dict[str, Any]) -> bool:
    """A serving plan (its `kind`, else the presence of instances or a mode)."""
    if plan.get("kind") is not None:
        return bool(plan["kind"] == "serving")
    return plan.get("instances") is not None or plan.get("mode") is not None


def plans_layout(
    plans: Sequence[dict[str, Any]], width: int, *, wide: bool = False, show_ids: bool = False
) -> Layout:
    serving = bool(plans) and is_serving(plans[0])
    return fit(plan_columns(serving, show_ids=show_ids, plans=plans), plans, width, wide=wide)


def details_table(plans: Sequence[dict[str, Any]], *, show_ids: bool) -> Table:
    """Each plan's rank, id (with `show_ids`) and explanation: the explanation wraps, the id
    stays whole."""
    table = Table(show_header=True, box=None, padding=(0, 1), pad_edge=False)
    table.add_column("rank", justify="right", no_wrap=True)
    if show_ids:
        table.add_column("id", no_wrap=True, min_width=max(len(str(p["id"])) for p in plans))
    table.add_column("explanation", ratio=1, overflow="fold")
    for plan in plans:
        cells = [str(plan["rank"])]
        if show_ids:
            cells.append(str(plan["id"]))
        table.add_row(*cells, explanation(plan))
    return table


# ---- searches ----------------------------------------------------------------------------
def _created(search: dict[str, Any]) -> str:
    created = search.get("created_at")
    return str(created).replace("T", " ")[:16] if created else ""


def _wall(search: dict[str, Any]) -> str:
    wall = (search.get("stats") or {}).get("wall_time_s")
    return f"{wall:.2f}" if isinstance(wall, int | float) else ""


SEARCH_COLUMNS: tuple[Column, ...] = (
    Column("id", lambda s: str(s["id"]), numeric=False, wrap=False),
    Column("status", lambda s: str(s.get("status", "")), numeric=False, wrap=False),
    Column("plans", lambda s: "" if s.get("num_plans") is None else str(s["num_plans"])),
    Column("model", lambda s: str(s.get("model_name") or ""), numeric=False, priority=60),
    Column("GPUs", lambda s: str(s.get("num_gpus") or ""), priority=50),
    Column("created", _created, numeric=False, wrap=False, priority=40),
    Column(
        "workload",
        lambda s: str((s.get("workload") or {}).get("kind", "")),
        numeric=False,
        priority=30,
    ),
    Column("wall s", _wall, priority=20),
)
"""The searches list's columns (the id is kept whole: `meshplan plans ID` takes it)."""


def searches_layout(searches: Sequence[dict[str, Any]], width: int, *, wide: bool) -> Layout:
    return fit(SEARCH_COLUMNS, searches, width, wide=wide)
