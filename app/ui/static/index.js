// /ui/: searches list with live progress, and the new-search form.
"use strict";
function bestText(plan) {
  if (!plan) return ["–", null];
  const m = plan.metrics || {};
  if (plan.kind === "serving") return [mp.fmt(m.goodput_rps) + " req/s goodput", m.goodput_rps];
  return [mp.fmt(m.tokens_per_s, 0) + " tokens/s", m.tokens_per_s];
}

// the best plan of a finished search, with the count of its plans (`total`)
async function bestPlan(search) {
  if (search.status !== "succeeded" && search.status !== "cancelled") return null;
  try {
    const page = (await mp.api(`/v1/searches/${search.id}/plans?limit=1`)).data;
    if (search.num_plans === null || search.num_plans === undefined) search.num_plans = page.total;
    return page.items[0] || null;
  } catch (e) { return null; }
}

function progressText(p) { return p && p.total ? `${p.evaluated} / ${p.total}` : "–"; }

function watch(search, row) {
  const cell = row.querySelector(".progress"), status = row.querySelector(".status");
  mp.events(search.events_url, (name, data) => {
    if (name === "progress") {
      cell.textContent = progressText(data.progress);
      status.textContent = data.status; status.className = "status status-" + data.status;
    } else if (name === "done") {
      loadSearches();
      return false;
    }
  }).catch(() => {});
}

async function searchRow(s) {
  const link = mp.el("a", { href: `/ui/searches/${s.id}`, text: s.model_name || (s.model && s.model.preset) || s.id.slice(0, 8) });
  const best = await bestPlan(s);
  const [text, value] = bestText(best);
  const row = mp.el("tr", { dataset: { searchId: s.id } }, [
    mp.cell(new Date(s.created_at).toLocaleString(), Date.parse(s.created_at)),
    mp.el("td", { class: "status status-" + s.status, text: s.status }),
    mp.el("td", {}, [link]),
    mp.cell(mp.clusterText(s.cluster) + ` (${s.num_gpus} GPUs)`),
    mp.cell((s.workload && s.workload.kind) || "training"),
    mp.el("td", { class: "progress", text: progressText(s.progress) }),
    mp.cell(text, value === null ? NaN : value),
    mp.cell(s.num_plans == null ? "–" : String(s.num_plans), s.num_plans == null ? NaN : s.num_plans),
  ]);
  row.querySelector("td:nth-child(7)").classList.add("best-throughput");
  if (s.status === "queued" || s.status === "running") watch(s, row);
  return row;
}

async function loadSearches() {
  const body = document.querySelector("#searches tbody");
  try {
    const list = (await mp.api("/v1/searches?limit=50")).data.items;
    const rows = await Promise.all(list.map(searchRow));
    body.replaceChildren(...rows);
  } catch (e) { mp.showError("Could not list searches: " + e.message); }
}

async function loadCatalog() {
  const presets = (await mp.api("/v1/model-presets")).data.items;
  const hardware = (await mp.api("/v1/hardware")).data.items;
  const ps = document.getElementById("preset"), hw = document.getElementById("accelerator");
  ps.replaceChildren(...presets.map(p => mp.el("option", { value: p.name, text: `${p.name} (${mp.fmt(p.num_parameters / 1e9, 1)} B)` })));
  hw.replaceChildren(...hardware.map(h => mp.el("option", { value: h.id, text: `${h.name} (${mp.fmt(h.memory_gib, 0)} GiB)` })));
  if (presets.some(p => p.name === "llama3-8b")) ps.value = "llama3-8b";
  if (hardware.some(h => h.id === "h100-sxm")) hw.value = "h100-sxm";
}

function requestBody(form) {
  const f = new FormData(form), n = k => Number(f.get(k));
  const kind = f.get("kind");
  const workload = kind === "serving"
    ? { kind: "serving", prompt_tokens: n("prompt_tokens"), output_tokens: n("output_tokens"),
        slo: { ttft_ms: n("ttft_ms"), tpot_ms: n("tpot_ms"), percentile: n("percentile") } }
    : { kind: "training", global_batch_size: n("global_batch_size"), sequence_length: n("sequence_length"), precision: f.get("precision") };
  return {
    model: { preset: f.get("preset") },
    cluster: { node_groups: [{ accelerator: f.get("accelerator"), num_nodes: n("num_nodes"), gpus_per_node: n("gpus_per_node") }] },
    workload: workload,
    top_k: n("top_k") || 10,
  };
}

async function showResult(search) {
  const box = document.getElementById("result");
  box.hidden = false;
  const best = await bestPlan(search);
  const [text] = bestText(best);
  box.replaceChildren(
    mp.el("p", {}, [
      mp.el("span", { class: "status status-" + search.status, text: search.status }),
      ` — ${search.num_plans == null ? 0 : search.num_plans} plans, best ${text}. `,
      mp.el("a", { id: "result-link", href: `/ui/searches/${search.id}`, text: "Open the search" }),
    ]),
    best ? mp.el("p", { class: "explanation", text: best.explanation }) : "",
  );
  if (search.error) box.append(mp.el("p", { class: "error", text: JSON.stringify(search.error) }));
}

async function submit(ev) {
  ev.preventDefault();
  const button = document.getElementById("submit"), box = document.getElementById("result");
  button.disabled = true;
  box.hidden = false; box.replaceChildren(mp.el("p", { text: "submitted…" }), mp.el("progress", { id: "submit-progress", max: "1", value: "0" }));
  try {
    let search = (await mp.api("/v1/searches?wait=0&dedupe=false", { method: "POST", body: requestBody(ev.target) })).data;
    loadSearches();
    const bar = document.getElementById("submit-progress");
    if (search.status === "queued" || search.status === "running") {
      await mp.events(search.events_url, (name, data) => {
        if (name === "progress" && data.progress && data.progress.total) { bar.max = data.progress.total; bar.value = data.progress.evaluated; }
      });
      search = (await mp.api(`/v1/searches/${search.id}`)).data;
    }
    await showResult(search);
    loadSearches();
  } catch (e) {
    box.replaceChildren(mp.el("p", { class: "error", text: "The search was refused: " + e.message }));
  } finally { button.disabled = false; }
}

document.addEventListener("DOMContentLoaded", () => {
  mp.sortable(document.getElementById("searches"));
  const kind = document.getElementById("kind");
  kind.addEventListener("change", () => {
    document.querySelectorAll(".training-only").forEach(e => { e.hidden = kind.value !== "training"; });
    document.querySelectorAll(".serving-only").forEach(e => { e.hidden = kind.value !== "serving"; });
  });
  document.getElementById("search-form").addEventListener("submit", submit);
  loadCatalog().catch(e => mp.showError("Could not load the catalog: " + e.message));
  loadSearches();
});
