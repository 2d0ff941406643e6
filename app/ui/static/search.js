// /ui/searches/{id}: ranked plans (sortable), Pareto charts, explanations, live progress.
"use strict";
const searchId = () => document.getElementById("summary").dataset.searchId;

function measures(plan) {
  const m = plan.metrics || {};
  if (plan.kind === "serving") {
    return { throughput: m.goodput_rps, memory: (m.weights_gib || 0) + (m.kv_cache_gib || 0), gpus: m.gpus_used };
  }
  return { throughput: m.tokens_per_s, memory: m.peak_memory_gib, gpus: mp.gpus(plan.parallelism) };
}

// points not dominated: no other point has throughput >= and cost <= with one strict
function paretoFront(points) {
  return points.filter(a => !points.some(b => b !== a && b.y >= a.y && b.x <= a.x && (b.y > a.y || b.x < a.x)));
}

function paretoChart(id, plans, costKey, costLabel, yLabel) {
  const points = plans.map(p => { const v = measures(p); return { x: v[costKey], y: v.throughput, rank: p.rank, id: p.id }; });
  const front = paretoFront(points).sort((a, b) => a.x - b.x);
  mp.chart(id, {
    type: "scatter",
    data: { datasets: [
      { label: "plans", data: points, backgroundColor: "#4e79a7", pointRadius: 5 },
      { label: "Pareto front", data: front, showLine: true, borderColor: "#e15759", backgroundColor: "#e15759", pointRadius: 3 },
    ] },
    options: {
      plugins: { tooltip: { callbacks: { label: c => `#${c.raw.rank}: ${mp.fmt(c.raw.y)} at ${mp.fmt(c.raw.x)}` } } },
      scales: { x: { title: { display: true, text: costLabel } }, y: { title: { display: true, text: yLabel } } },
      onClick: (ev, elements) => { if (elements.length) { const pt = points[elements[0].index]; if (pt) location.href = `/ui/plans/${pt.id}`; } },
    },
  });
}

function columns(kind) {
  if (kind === "serving") {
    return [
      ["rank", p => [String(p.rank), p.rank]],
      ["mode", p => [p.mode]],
      ["instances", p => [(p.instances || []).map(i => `${i.count}× ${i.role} TP${i.parallelism.tensor} PP${i.parallelism.pipeline}`).join(", ")]],
      ["engine", p => [p.engine]],
      ["goodput (req/s)", p => [mp.fmt(p.metrics.goodput_rps), p.metrics.goodput_rps]],
      ["goodput / GPU", p => [mp.fmt(p.metrics.goodput_rps_per_gpu), p.metrics.goodput_rps_per_gpu]],
      ["TTFT p90 (ms)", p => [mp.fmt(p.metrics.ttft_ms_p90), p.metrics.ttft_ms_p90]],
      ["TPOT p90 (ms)", p => [mp.fmt(p.metrics.tpot_ms_p90), p.metrics.tpot_ms_p90]],
      ["GPUs", p => [String(p.metrics.gpus_used), p.metrics.gpus_used]],
      ["memory / GPU (GiB)", p => { const v = measures(p).memory; return [mp.fmt(v, 1), v]; }],
    ];
  }
  return [
    ["rank", p => [String(p.rank), p.rank]],
    ["parallelism", p => [mp.dims(p.parallelism) + (p.parallelism.sequence_parallel ? " SP" : "")]],
    ["micro-batch", p => [String(p.micro_batch_size), p.micro_batch_size]],
    ["ZeRO", p => [String(p.zero_stage), p.zero_stage]],
    ["recompute", p => [p.recompute]],
    ["schedule", p => [p.pipeline_schedule]],
    ["step (s)", p => [mp.fmt(p.metrics.step_time_s, 3), p.metrics.step_time_s]],
    ["tokens/s", p => [mp.fmt(p.metrics.tokens_per_s, 0), p.metrics.tokens_per_s]],
    ["MFU", p => [mp.fmt(100 * p.metrics.mfu, 1) + " %", p.metrics.mfu]],
    ["bubble", p => [mp.fmt(100 * p.metrics.bubble_fraction, 1) + " %", p.metrics.bubble_fraction]],
    ["peak memory (GiB)", p => [mp.fmt(p.metrics.peak_memory_gib, 1), p.metrics.peak_memory_gib]],
    ["GPUs", p => [String(mp.gpus(p.parallelism)), mp.gpus(p.parallelism)]],
  ];
}

function renderPlans(plans) {
  const kind = plans.length ? plans[0].kind : "training";
  const cols = columns(kind);
  const table = document.getElementById("plans");
  table.tHead.replaceChildren(mp.el("tr", {}, [mp.el("th", { text: "✓" }), ...cols.map(([name]) => mp.el("th", { text: name }))]));
  table.tBodies[0].replaceChildren(...plans.map(p => {
    const box = mp.el("input", { type: "checkbox", class: "pick", value: p.id });
    const cells = cols.map(([, f]) => { const [text, value] = f(p); return mp.cell(text, value); });
    const link = mp.el("a", { href: `/ui/plans/${p.id}`, text: cells[0].textContent });
    cells[0].replaceChildren(link);
    return mp.el("tr", { dataset: { planId: p.id } }, [mp.el("td", {}, [box]), ...cells]);
  }));
  mp.sortable(table);
  const compare = document.getElementById("compare");
  table.addEventListener("change", () => { compare.disabled = table.querySelectorAll(".pick:checked").length < 2; });
  compare.addEventListener("click", () => {
    const ids = Array.from(table.querySelectorAll(".pick:checked")).map(b => b.value);
    location.href = "/ui/compare?plans=" + ids.join(",");
  });
  const yLabel = kind === "serving" ? "goodput (requests/s)" : "throughput (tokens/s)";
  paretoChart("pareto-memory", plans, "memory", kind === "serving" ? "weights + KV cache per GPU (GiB)" : "peak memory (GiB)", yLabel);
  paretoChart("pareto-gpus", plans, "gpus", "GPUs used", yLabel);
  document.getElementById("explanations").replaceChildren(...plans.map(p => mp.el("li", { value: String(p.rank) }, [
    mp.el("a", { href: `/ui/plans/${p.id}`, text: `#${p.rank}` }), " ", p.explanation || "",
  ])));
}

async function loadPlans() {
  const plans = [];
  let url = `/v1/searches/${searchId()}/plans?limit=100`;
  for (;;) {
    const page = (await mp.api(url)).data;
    plans.push(...page.items);
    if (!page.next_cursor) break;
    url = `/v1/searches/${searchId()}/plans?limit=100&cursor=${encodeURIComponent(page.next_cursor)}`;
  }
  renderPlans(plans);
}

function renderSearch(s) {
  const w = s.workload || {};
  const parts = [
    ["status", s.status], ["model", s.model_name], ["cluster", mp.clusterText(s.cluster) + ` (${s.num_gpus} GPUs)`],
    ["workload", w.kind === "serving" ? `serving, ${w.prompt_tokens} → ${w.output_tokens} tokens` : `training, batch ${w.global_batch_size} × ${w.sequence_length} tokens, ${w.precision}`],
    ["objective", s.objective], ["wall time", mp.fmt(s.stats && s.stats.wall_time_s) + " s"], ["plans", s.num_plans === null ? "–" : s.num_plans],
  ];
  document.getElementById("search-info").replaceChildren(mp.el("dl", { class: "facts" }, parts.flatMap(([k, v]) => [mp.el("dt", { text: k }), mp.el("dd", { text: String(v), "data-label": k })])));
}

async function load() {
  try {
    const s = (await mp.api(`/v1/searches/${searchId()}`)).data;
    renderSearch(s);
    if (s.status === "queued" || s.status === "running") {
      const bar = document.getElementById("progress");
      bar.hidden = false;
      await mp.events(s.events_url, (name, data) => {
        if (name === "progress" && data.progress && data.progress.total) { bar.max = data.progress.total; bar.value = data.progress.evaluated; }
      });
      bar.hidden = true;
      renderSearch((await mp.api(`/v1/searches/${searchId()}`)).data);
    }
    await loadPlans();
    document.body.dataset.ready = "1";
  } catch (e) { mp.showError(e.message); }
}
document.addEventListener("DOMContentLoaded", load);
