// /ui/plans/{id}: schedule timeline, memory per stage, time breakdown, warnings, exports,
// measurements; serving plans: latency percentiles and goodput against arrival rate.
"use strict";
const planId = () => document.getElementById("summary").dataset.planId;

function show(cls) { document.querySelectorAll("." + cls).forEach(e => { e.hidden = false; }); }

function renderInfo(plan, search) {
  const m = plan.metrics || {};
  const facts = plan.kind === "serving"
    ? [["rank", plan.rank], ["mode", plan.mode], ["engine", plan.engine], ["goodput", mp.fmt(m.goodput_rps) + " req/s"], ["GPUs", m.gpus_used]]
    : [["rank", plan.rank], ["parallelism", mp.dims(plan.parallelism)], ["micro-batch", plan.micro_batch_size], ["ZeRO", plan.zero_stage],
       ["recompute", plan.recompute], ["schedule", plan.pipeline_schedule], ["step", mp.fmt(m.step_time_s, 3) + " s"],
       ["tokens/s", mp.fmt(m.tokens_per_s, 0)], ["MFU", mp.fmt(100 * m.mfu, 1) + " %"], ["peak memory", mp.fmt(m.peak_memory_gib, 1) + " GiB"]];
  facts.unshift(["search", search.model_name + " on " + mp.clusterText(search.cluster)]);
  const dl = mp.el("dl", { class: "facts" }, facts.flatMap(([k, v]) => [mp.el("dt", { text: k }), mp.el("dd", { text: String(v), "data-label": k })]));
  const back = mp.el("a", { href: `/ui/searches/${plan.search_id}`, text: "← all plans of this search" });
  document.getElementById("plan-info").replaceChildren(back, dl);
  document.getElementById("explanation").textContent = plan.explanation || "";
  document.getElementById("warnings").replaceChildren(...(plan.warnings || []).map(w => mp.el("li", {}, [mp.el("code", { text: w.code }), " " + w.detail])));
}

async function renderTimeline(plan) {
  const answer = (await mp.api(`/ui/data/plans/${plan.id}/schedule`)).data;
  const t = answer.timeline;
  const labels = t.stages.map((_, j) => "stage " + j);
  const datasets = t.kinds.map((kind, k) => ({
    label: kind.replace("_", " "),
    data: t.stages.flatMap((segs, j) => segs.filter(s => s[2] === k).map(s => ({ x: [s[0], s[1]], y: labels[j], mb: s[3] }))),
    backgroundColor: mp.colors[kind], borderWidth: 0, barPercentage: 0.9, categoryPercentage: 1.0,
  })).filter(d => d.data.length);
  mp.chart("timeline", {
    type: "bar",
    data: { labels: labels, datasets: datasets },
    options: {
      indexAxis: "y", grouped: false,
      scales: { x: { type: "linear", min: 0, max: t.end_s, title: { display: true, text: "seconds into the step" } }, y: { stacked: false } },
      plugins: { tooltip: { callbacks: { label: c => `${c.dataset.label}${c.raw.mb >= 0 ? " mb " + c.raw.mb : ""}: ${mp.fmt(c.raw.x[0], 4)}–${mp.fmt(c.raw.x[1], 4)} s` } } },
    },
  });
  document.getElementById("schedule-note").textContent =
    `${t.num_microbatches} micro-batches, ${t.virtual} virtual stage(s) per rank; pipeline flush at ${mp.fmt(t.pipeline_end_s, 3)} s, ` +
    `then exposed data-parallel communication and the optimizer step (${mp.fmt(t.end_s, 3)} s). The cost model's step, ${mp.fmt(answer.step_time_s, 3)} s, ` +
    "adds fill/drain transfers, stragglers and fixed overheads.";
  window.mpTimeline = answer;
  // zoom: the whole step, the warm-up (until the last stage's first backward, twice over), the flush
  const firstBackward = Math.min(...t.stages.map(segs => { const b = segs.find(s => t.kinds[s[2]] === "backward"); return b ? b[1] : t.end_s; }));
  const zoom = (min, max) => { const c = mp.charts.timeline; c.options.scales.x.min = min; c.options.scales.x.max = max; c.update(); };
  document.getElementById("zoom-all").onclick = () => zoom(0, t.end_s);
  document.getElementById("zoom-start").onclick = () => zoom(0, Math.min(t.end_s, 2 * firstBackward));
  document.getElementById("zoom-end").onclick = () => zoom(Math.max(0, t.pipeline_end_s - 2 * firstBackward), t.end_s);
}

function renderMemory(plan) {
  const mem = plan.memory || {}, stages = mem.by_stage || [];
  const labels = stages.map((_, j) => "stage " + j);
  const parts = [["weights_gib", "weights", "weights"], ["gradients_gib", "gradients", "gradients"], ["optimizer_gib", "optimizer state", "optimizer_state"], ["activations_gib", "activations", "activations"], ["other_gib", "other", "other"]];
  const datasets = parts.map(([key, label, color]) => ({ type: "bar", label: label, data: stages.map(s => s[key] || 0), backgroundColor: mp.colors[color], stack: "memory" }));
  datasets.push({ type: "line", label: "capacity", data: stages.map(() => mem.capacity_gib), borderColor: "#222", borderDash: [6, 4], pointRadius: 0, stack: "capacity" });
  if (mem.usable_gib) datasets.push({ type: "line", label: "usable (capacity − headroom)", data: stages.map(() => mem.usable_gib), borderColor: "#a11", borderDash: [2, 3], pointRadius: 0, stack: "usable" });
  mp.chart("memory", { type: "bar", data: { labels: labels, datasets: datasets },
    options: { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, title: { display: true, text: "GiB per GPU" } } } } });
}

function renderBreakdown(plan) {
  const b = (plan.metrics || {}).time_breakdown_s || {};
  const keys = Object.keys(b).filter(k => b[k] > 0);
  mp.chart("breakdown", { type: "bar", data: { labels: keys.map(k => k.replaceAll("_", " ")), datasets: [{ label: "seconds per step", data: keys.map(k => b[k]), backgroundColor: "#4e79a7" }] },
    options: { indexAxis: "y", plugins: { legend: { display: false } }, scales: { x: { title: { display: true, text: "seconds per step" } } } } });
}

function renderLatency(plan, search) {
  const m = plan.metrics || {}, slo = (search.workload || {}).slo || {};
  const pct = ["p50", "p90", "p99"];
  for (const [id, key, sloValue, label] of [["ttft", "ttft_ms", slo.ttft_ms, "TTFT (ms)"], ["tpot", "tpot_ms", slo.tpot_ms, "TPOT (ms)"]]) {
    const datasets = [{ type: "bar", label: label, data: pct.map(p => m[`${key}_${p}`]), backgroundColor: "#4e79a7" }];
    if (sloValue) datasets.push({ type: "line", label: "SLO", data: pct.map(() => sloValue), borderColor: "#e15759", borderDash: [6, 4], pointRadius: 0 });
    mp.chart(id, { type: "bar", data: { labels: pct, datasets: datasets }, options: { scales: { y: { beginAtZero: true, title: { display: true, text: label } } } } });
  }
}

async function renderGoodput(plan, search) {
  const base = plan.metrics.goodput_rps || 1;
  const rates = [0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5].map(f => f * base);
  const planBody = {};
  for (const k of ["mode", "instances", "engine", "engine_options"]) if (plan[k] !== null && plan[k] !== undefined) planBody[k] = plan[k];
  const workload = Object.fromEntries(Object.entries(search.workload).filter(([, v]) => v !== null));
  const points = [];
  for (const rate of rates) {
    const answer = (await mp.api("/v1/estimate", { method: "POST", body: { model: search.model, cluster: search.cluster, workload: Object.assign({}, workload, { arrival_rate_rps: rate }), plan: planBody } })).data;
    points.push({ x: rate, y: rate * answer.metrics.slo_attainment, attainment: answer.metrics.slo_attainment });
  }
  mp.chart("goodput", { type: "scatter", data: { datasets: [
    { label: "requests/s meeting the SLO", data: points, showLine: true, borderColor: "#4e79a7", backgroundColor: "#4e79a7" },
    { label: "offered rate", data: [{ x: 0, y: 0 }, { x: rates[rates.length - 1], y: rates[rates.length - 1] }], showLine: true, borderColor: "#bbb", borderDash: [4, 4], pointRadius: 0 },
  ] }, options: { scales: { x: { title: { display: true, text: "arrival rate (requests/s)" } }, y: { title: { display: true, text: "goodput (requests/s)" } } } } });
}

async function renderMeasurements(plan) {
  const body = document.querySelector("#measurements tbody");
  const items = (await mp.api(`/v1/plans/${plan.id}/measurements`)).data.items;
  body.replaceChildren(...(items.length ? items.map(x => mp.el("tr", {}, [
    mp.cell(new Date(x.measured_at || x.created_at).toLocaleString()), mp.cell(mp.fmt(x.step_time_s, 3), x.step_time_s),
    mp.cell(mp.fmt(x.tokens_per_s, 0), x.tokens_per_s), mp.cell(Array.isArray(x.peak_memory_gib) ? x.peak_memory_gib.map(v => mp.fmt(v, 1)).join(", ") : mp.fmt(x.peak_memory_gib, 1)),
    mp.cell(mp.fmt(x.predicted_step_time_s, 3), x.predicted_step_time_s), mp.cell(mp.fmt(100 * x.error, 1) + " %", x.error),
  ])) : [mp.el("tr", {}, [mp.el("td", { colspan: "6", text: "none posted (POST /v1/plans/{id}/measurements)" })])]));
}

function wireExports(plan) {
  const out = document.getElementById("export-output");
  document.querySelectorAll("button.export").forEach(b => b.addEventListener("click", async () => {
    out.hidden = false;
    try {
      const e = (await mp.api(`/v1/plans/${plan.id}/export/${b.dataset.format}`)).data;
      out.textContent = `# ${e.filename || e.format}\n` + (e.content || JSON.stringify(e, null, 2));
    } catch (err) { out.textContent = `${b.dataset.format}: ${err.message}`; }
  }));
}

async function load() {
  try {
    const plan = (await mp.api(`/v1/plans/${planId()}`)).data;
    const search = (await mp.api(`/v1/searches/${plan.search_id}`)).data;
    window.mpPlan = plan;
    renderInfo(plan, search);
    wireExports(plan);
    const jobs = [renderMeasurements(plan)];
    if (plan.kind === "serving") {
      show("serving-only");
      renderLatency(plan, search);
      jobs.push(renderGoodput(plan, search));
    } else {
      show("training-only");
      renderMemory(plan);
      renderBreakdown(plan);
      // a plan whose cost model reports no per-rank schedule (422) still shows the rest
      jobs.push(renderTimeline(plan).catch(e => { document.getElementById("schedule-note").textContent = "No schedule: " + e.message; }));
    }
    await Promise.all(jobs);
    document.body.dataset.ready = "1";
  } catch (e) { mp.showError(e.message); }
}
document.addEventListener("DOMContentLoaded", load);
