// Shared by every page: API calls with the key kept in sessionStorage, SSE over fetch,
// sortable tables, formatting. No framework; Chart.js is loaded before this file.
"use strict";
const KEY = "meshplan.api_key";
const mp = {
  key() { return sessionStorage.getItem(KEY); },
  headers(extra) {
    const h = Object.assign({ accept: "application/json" }, extra || {});
    const k = mp.key();
    if (k) h.authorization = "Bearer " + k;
    return h;
  },
  askKey() {
    const form = document.getElementById("key-form");
    form.hidden = false;
    document.getElementById("key-input").focus();
  },
  showError(message) {
    const box = document.getElementById("error");
    box.textContent = message;
    box.hidden = false;
  },
  // fetch JSON from the API; a problem+json answer becomes an Error carrying the problem
  async api(path, options) {
    options = options || {};
    const init = { method: options.method || "GET", headers: mp.headers(options.body ? { "content-type": "application/json" } : {}) };
    if (options.body) init.body = JSON.stringify(options.body);
    const resp = await fetch(path, init);
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = { detail: text }; }
    if (resp.status === 401) mp.askKey();
    if (!resp.ok) {
      const err = new Error((data && (data.detail || data.title)) || resp.statusText);
      err.status = resp.status; err.problem = data;
      throw err;
    }
    return { status: resp.status, data: data, headers: resp.headers };
  },
  // Server-Sent Events read with fetch (EventSource cannot send Authorization)
  async events(path, onEvent) {
    const resp = await fetch(path, { headers: mp.headers({ accept: "text/event-stream" }) });
    if (!resp.ok) throw new Error("events: " + resp.status);
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
        let name = "message"; const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
        }
        if (data.length) {
          let parsed; try { parsed = JSON.parse(data.join("\n")); } catch (e) { parsed = data.join("\n"); }
          if (onEvent(name, parsed) === false || name === "done") { reader.cancel(); return; }
        }
      }
    }
  },
  el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") e.textContent = v;
      else if (k === "dataset") Object.assign(e.dataset, v);
      else e.setAttribute(k, v);
    }
    for (const c of children || []) e.append(c);
    return e;
  },
  fmt(x, digits) {
    if (x === null || x === undefined) return "–";
    if (typeof x !== "number") return String(x);
    if (digits === undefined) digits = Math.abs(x) >= 100 ? 0 : Math.abs(x) >= 1 ? 2 : 3;
    return x.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
  },
  dims(p) {
    if (!p) return "";
    const order = [["data", "DP"], ["tensor", "TP"], ["pipeline", "PP"], ["virtual_pipeline", "VP"], ["context", "CP"], ["expert", "EP"], ["expert_tensor", "ETP"]];
    return order.filter(([k]) => p[k] && p[k] > 1).map(([k, n]) => n + p[k]).join(" ") || "1 GPU layout";
  },
  gpus(p) { return p ? (p.data || 1) * (p.tensor || 1) * (p.pipeline || 1) * (p.context || 1) : null; },
  clusterText(c) {
    return ((c && c.node_groups) || []).map(g => `${g.num_nodes}×${g.gpus_per_node || "?"} ${g.accelerator || g.system}`).join(" + ");
  },
  // click a header to sort by its column (numbers by value: td[data-value])
  sortable(table) {
    table.querySelectorAll("th").forEach((th, index) => {
      th.addEventListener("click", () => {
        const asc = th.dataset.sort !== "asc";
        table.querySelectorAll("th").forEach(h => delete h.dataset.sort);
        th.dataset.sort = asc ? "asc" : "desc";
        const rows = Array.from(table.tBodies[0].rows);
        const value = r => { const c = r.cells[index]; return c.dataset.value !== undefined ? parseFloat(c.dataset.value) : c.textContent; };
        rows.sort((a, b) => {
          const x = value(a), y = value(b);
          const cmp = typeof x === "number" && typeof y === "number" ? (isNaN(x) ? 1 : isNaN(y) ? -1 : x - y) : String(x).localeCompare(String(y));
          return asc ? cmp : -cmp;
        });
        rows.forEach(r => table.tBodies[0].append(r));
      });
    });
  },
  cell(text, value) {
    const td = mp.el("td", { text: text });
    if (value !== undefined && value !== null) td.dataset.value = value;
    return td;
  },
  charts: {},
  chart(id, config) {
    if (mp.charts[id]) mp.charts[id].destroy();
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options || {});
    mp.charts[id] = new Chart(document.getElementById(id), config);
    return mp.charts[id];
  },
  colors: { forward: "#4e79a7", backward: "#f28e2b", communication: "#e15759", bubble: "#d9d9d9", data_parallel: "#76b7b2", optimizer: "#59a14f", "weight-gradient": "#edc948",
    weights: "#4e79a7", gradients: "#f28e2b", optimizer_state: "#59a14f", activations: "#e15759", other: "#b07aa1" },
};
window.mp = mp;

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("key-form");
  const forget = document.getElementById("key-forget");
  forget.hidden = !mp.key();
  if (document.body.dataset.auth === "on" && !mp.key()) mp.askKey();
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById("key-input").value.trim());
    location.reload();
  });
  forget.addEventListener("click", () => { sessionStorage.removeItem(KEY); location.reload(); });
});
