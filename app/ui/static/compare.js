// /ui/compare?plans=ID,ID: plans side by side, rows that differ highlighted.
"use strict";
const ROWS = [
  ["search", p => p.search_id.slice(0, 8)],
  ["rank", p => p.rank],
  ["kind", p => p.kind],
  ["parallelism", p => p.parallelism ? mp.dims(p.parallelism) + (p.parallelism.sequence_parallel ? " SP" : "") : null],
  ["micro-batch", p => p.micro_batch_size],
  ["ZeRO", p => p.zero_stage],
  ["recompute", p => p.recompute],
  ["schedule", p => p.pipeline_schedule],
  ["stage layers", p => p.stage_layers ? p.stage_layers.join(",") : null],
  ["framework", p => p.framework],
  ["mode", p => p.mode],
  ["instances", p => p.instances ? p.instances.map(i => `${i.count}× ${i.role} TP${i.parallelism.tensor} PP${i.parallelism.pipeline}`).join(", ") : null],
  ["engine", p => p.engine],
];
const METRICS = [
  ["step time (s)", "step_time_s", -1], ["tokens/s", "tokens_per_s", 1], ["MFU", "mfu", 1], ["peak memory (GiB)", "peak_memory_gib", -1],
  ["bubble fraction", "bubble_fraction", -1], ["goodput (req/s)", "goodput_rps", 1], ["goodput / GPU", "goodput_rps_per_gpu", 1],
  ["TTFT p90 (ms)", "ttft_ms_p90", -1], ["TPOT p90 (ms)", "tpot_ms_p90", -1], ["GPUs used", "gpus_used", -1],
];

async function load() {
  const ids = document.getElementById("summary").dataset.planIds.split(",").filter(Boolean);
  const table = document.getElementById("compare-table");
  try {
    const plans = await Promise.all(ids.map(async id => (await mp.api(`/v1/plans/${id}`)).data));
    table.tHead.replaceChildren(mp.el("tr", {}, [mp.el("th", { text: "" }), ...plans.map(p => mp.el("th", {}, [mp.el("a", { href: `/ui/plans/${p.id}`, text: `#${p.rank} ${p.id.slice(0, 8)}` })]))]));
    const rows = [];
    for (const [label, f] of ROWS) {
      const values = plans.map(f);
      if (values.every(v => v === null || v === undefined)) continue;
      const tr = mp.el("tr", { dataset: { row: label } }, [mp.el("th", { text: label }), ...values.map(v => mp.cell(v === null || v === undefined ? "–" : String(v)))]);
      if (new Set(values.map(String)).size > 1) tr.classList.add("diff");
      rows.push(tr);
    }
    for (const [label, key, better] of METRICS) {
      const values = plans.map(p => (p.metrics || {})[key]);
      if (values.every(v => v === null || v === undefined)) continue;
      const tr = mp.el("tr", { dataset: { row: label } }, [mp.el("th", { text: label }), ...values.map(v => mp.cell(mp.fmt(v), v))]);
      const nums = values.filter(v => typeof v === "number");
      if (new Set(nums.map(v => v.toPrecision(6))).size > 1) {
        tr.classList.add("diff");
        const best = better > 0 ? Math.max(...nums) : Math.min(...nums);
        values.forEach((v, i) => { if (v === best) tr.cells[i + 1].classList.add("best"); });
      }
      rows.push(tr);
    }
    table.tBodies[0].replaceChildren(...rows);
    document.body.dataset.ready = "1";
  } catch (e) { mp.showError(e.message); }
}
document.addEventListener("DOMContentLoaded", load);
