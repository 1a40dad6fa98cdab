// The dashboard: one snapshot (GET /api/state, then every change over /api/events) drawn into tables.
"use strict";

let current = null;
let rigFilter = "";
let openLog = null;

function whyCodes(row) {
  if (Array.isArray(row.why) && row.why.length) return row.why.map(String);
  if (typeof row.why === "string" && row.why) return [row.why];
  const parts = [row.blocked ? "blocked" : "ready"];
  if (row.dispatch_failures) parts.push("failed×" + row.dispatch_failures);
  if (row.retry_at) parts.push("retry " + clock(row.retry_at));
  return parts;
}

// Each reason code in a box of its own, so that several never read as one word.
function whyOf(row) {
  const span = el("span");
  for (const code of whyCodes(row)) span.appendChild(el("span", code, "code"));
  return span;
}

// Admission control's state from `scheduler status`, as short lines (none when it is not set).
function hostLine(h) {
  if (!h) return "";
  const parts = [];
  const r = h.reading;
  if (r) {
    if (r.load_per_core !== null && r.load_per_core !== undefined) parts.push("load " + r.load_per_core.toFixed(2) + "/core");
    if (r.free_memory !== null && r.free_memory !== undefined) parts.push("memory " + size(r.free_memory) + " free");
    for (const [path, free] of Object.entries(r.free_disk || {})) parts.push("disk " + size(free) + " free on " + path);
    if (parts.length) parts[parts.length - 1] += " (read " + (h.fresh ? "now" : clock(h.read_at)) + ")";
  }
  if (h.hold_file) {
    const holding = (h.held || []).some((x) => x.code === "hold-file");
    parts.push("hold file " + h.hold_file + (holding ? " present" : " absent"));
  }
  return parts.join("; ");
}

function size(n) {
  const units = [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];
  for (const [unit, scale] of units) if (n >= scale) return (n / scale).toFixed(1) + unit;
  return n + "B";
}

function limits(s) {
  const out = [];
  if (s.binding) out.push("binding: " + s.binding.code + (s.binding.detail ? " (" + s.binding.detail + ")" : ""));
  const host = hostLine(s.host);
  if (host) out.push("host: " + host);
  const budgets = (s.budgets || []).map((b) => (b.rig || "town") + " " + b.spent + "/" + b.budget + (b.window ? " per " + b.window : ""));
  if (budgets.length) out.push("budgets: " + budgets.join(", "));
  const throttles = (s.throttles || []).map((t) => (t.rig || "town") + " until " + clock(t.until) + (t.reason ? " (" + t.reason + ")" : ""));
  if (throttles.length) out.push("throttled: " + throttles.join(", "));
  const caps = [];
  for (const key of ["rig_caps", "label_caps"]) {
    for (const [k, v] of Object.entries(s[key] || {})) caps.push(k + "=" + v);
  }
  if (caps.length) out.push("caps: " + caps.join(", "));
  if (s.circuit_broken) out.push("circuit-broken: " + s.circuit_broken);
  return out;
}

function itemLink(id) {
  const a = el("a", id);
  a.href = "/item/" + encodeURIComponent(id);
  return a;
}

function button(label, onClick) {
  const b = el("button", label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

function cell(row, content, cls) {
  const td = el("td", null, cls);
  if (content instanceof Node) td.appendChild(content); else td.textContent = content === undefined || content === null ? "" : String(content);
  row.appendChild(td);
  return td;
}

function drawHeader(snap) {
  const s = snap.scheduler;
  document.getElementById("town").textContent = snap.town + " · " + clock(snap.at) + "Z";
  const badge = document.getElementById("state");
  badge.textContent = s.paused ? "PAUSED by " + (s.paused_by || "unknown") : "active";
  badge.className = "badge" + (s.paused ? " paused" : "");
  const cap = s.mode === "deferred" ? (s.active_polecats === null ? "?" : s.active_polecats) + "/" + s.max_polecats : "direct";
  document.getElementById("summary").textContent =
    "mode " + s.mode + " · polecats " + cap + (snap.executor ? " · executor " + snap.executor : "") + " · queued " + s.queued_total + " (" + s.queued_ready + " ready)" +
    (s.last_dispatch_at ? " · last dispatch " + clock(s.last_dispatch_at) : "") + drains(snap.forecast);
  const lines = limits(s);
  if (s.executor_error) lines.push("executor: " + s.executor_error);
  for (const row of s.source_stale || []) lines.push("rig " + row.rig + " source stale (" + row.kind + "): " + row.detail);
  document.getElementById("limits").textContent = lines.join(" · ");
}

function drawRigChoice(snap) {
  const select = document.getElementById("rig");
  const names = Object.keys(snap.rigs);
  const have = Array.from(select.options).map((o) => o.value).slice(1);
  if (have.join("\n") === names.join("\n")) return;
  while (select.options.length > 1) select.remove(1);
  for (const name of names) {
    const option = el("option", name);
    option.value = name;
    select.appendChild(option);
  }
  select.value = names.includes(rigFilter) ? rigFilter : "";
}

function eta(stamp) {
  return stamp ? String(stamp).slice(11, 16) : "-";
}

function drains(f) {
  if (!f || f.error) return "";
  if (!f.drain_at) return " · queue drained";
  return " · drains ≈" + eta(f.drain_at) + (f.drain_p90_at ? " (p90 " + eta(f.drain_p90_at) + ")" : "");
}

function drawQueue(snap) {
  const body = document.querySelector("#queue tbody");
  clear(body);
  const rows = snap.queue.filter((r) => !rigFilter || r.target_rig === rigFilter);
  // The snapshot carries the queue's first rows; the counts are the whole queue's.
  const rig = rigFilter ? snap.rigs[rigFilter] : null;
  const total = rigFilter ? (rig && !rig.error ? rig.queued : rows.length) : snap.scheduler.items_total;
  document.getElementById("queue-count").textContent =
    "(" + (total > rows.length ? rows.length + " of " + total + " shown" : rows.length) + ")";
  if (!rows.length) emptyRow(body, 9, rigFilter ? "nothing queued for " + rigFilter : "nothing queued");
  rows.forEach((r, i) => {
    const tr = el("tr", null, r.blocked ? "blocked" : "");
    tr.dataset.item = r.id;
    cell(tr, i + 1, "num");
    cell(tr, itemLink(r.id));
    cell(tr, r.target_rig);
    const score = cell(tr, r.score === null || r.score === undefined ? "-" : r.score.toFixed(2), "num");
    score.title = String(r.score);
    cell(tr, eta(r.start_at), "num").title = r.start_at || "cannot start yet";
    cell(tr, eta(r.done_at), "num").title = r.done_at || "";
    cell(tr, whyOf(r), "why");
    cell(tr, r.title, "title");
    cell(tr, button("clear", async () => {
      if (!confirm("Clear " + r.id + " from the queue? Its sling context closes as cleared; the item stays.")) return;
      const done = await act("/api/clear/" + encodeURIComponent(r.id));
      if (done) say("cleared " + r.id + " (" + done.cleared + " context(s))");
    }));
    body.appendChild(tr);
  });
}

async function showLog(id) {
  const pre = document.getElementById("log");
  if (openLog === id && !pre.hidden) { pre.hidden = true; openLog = null; return; }
  openLog = id;
  const response = await fetch("/api/logs/" + encodeURIComponent(id));
  const data = await response.json();
  pre.textContent = response.ok ? (data.lines.join("\n") || "(no output yet)") : data.error;
  pre.hidden = false;
}

function drawPolecats(snap) {
  const body = document.querySelector("#polecats tbody");
  clear(body);
  const rows = snap.polecats.filter((p) => !rigFilter || p.rig === rigFilter);
  document.getElementById("polecat-count").textContent = "(" + rows.length + ")";
  if (!rows.length) emptyRow(body, 9, "no polecat running");
  for (const p of rows) {
    const tr = el("tr");
    tr.dataset.polecat = p.id;
    cell(tr, p.id, "mono");
    cell(tr, itemLink(p.item_id));
    cell(tr, p.title, "title");
    cell(tr, p.rig);
    cell(tr, p.executor);
    cell(tr, clock(p.started_at));
    cell(tr, runtime(p.runtime_seconds), "num");
    cell(tr, p.attach || p.logs_command, "mono");
    const actions = cell(tr, button("log", () => showLog(p.id)));
    actions.appendChild(button("stop", async () => {
      if (!confirm("Stop polecat " + p.id + " (working on " + p.item_id + ")?")) return;
      const done = await act("/api/stop/" + encodeURIComponent(p.id));
      if (done) say("stopped " + p.id);
    }));
    body.appendChild(tr);
  }
}

const FAILED_OUTCOMES = ["failed", "timed-out", "vanished"];

function drawRuns(snap) {
  const body = document.querySelector("#runs tbody");
  clear(body);
  const rows = (snap.runs || []).filter((r) => r.outcome !== "running" && (!rigFilter || r.rig === rigFilter));
  document.getElementById("run-count").textContent = "(" + rows.length + ")";
  if (!rows.length) emptyRow(body, 7, "no run ended yet");
  for (const r of rows) {
    const failed = FAILED_OUTCOMES.includes(r.outcome);
    const tr = el("tr", null, failed ? "failed" : "");
    cell(tr, clock(r.ended_at));
    cell(tr, itemLink(r.item_id));
    cell(tr, r.rig);
    cell(tr, (failed ? "! " : "") + r.outcome);
    cell(tr, r.exit_code === null ? "" : r.exit_code, "num");
    cell(tr, runtime(r.runtime_seconds), "num");
    cell(tr, r.polecat_id, "mono");
    body.appendChild(tr);
  }
}

function drawRigs(snap) {
  const body = document.querySelector("#rigs tbody");
  clear(body);
  if (!Object.keys(snap.rigs).length) emptyRow(body, 6, "no rig registered");
  for (const [name, r] of Object.entries(snap.rigs)) {
    if (rigFilter && name !== rigFilter) continue;
    const tr = el("tr");
    cell(tr, name);
    if (r.error) { cell(tr, r.error).colSpan = 5; body.appendChild(tr); continue; }
    for (const n of [r.ready, r.blocked, r.queued, r.running, r.merge_queue.depth]) cell(tr, n, "num");
    body.appendChild(tr);
  }
}

function drawLog(id, entries, line, empty) {
  const list = document.getElementById(id);
  clear(list);
  if (!entries.length) list.appendChild(el("li", empty, "empty"));
  for (const entry of entries) list.appendChild(line(entry));
}

// An event as a short sentence, as `sluice top` says it (sluice.surfaces.top.event_words).
function eventWords(e) {
  const p = e.payload || {};
  const where = p.item_id && p.rig ? p.item_id + " → " + p.rig : (p.item_id || p.rig || "");
  const by = p.by ? " by " + p.by : "";
  switch (e.type) {
    case "Dispatched": return "launched " + where + (p.polecat_id ? " as " + p.polecat_id : "");
    case "DispatchFailed": return "launch of " + where + " failed (" + p.failures + "): " + (p.error || "");
    case "ContextClosed": return where + " left the queue: " + (p.reason || "");
    case "Enqueued": return "queued " + where;
    case "Paused": case "Resumed": return e.type.toLowerCase() + by;
    default: {
      const rest = Object.entries(p).filter(([k, v]) => k !== "item_id" && k !== "rig" && v !== null && typeof v !== "object")
        .map(([k, v]) => k + " " + v);
      return [e.type, where, ...rest].filter(Boolean).join(" ");
    }
  }
}

// A launch logs Dispatched and its context's ContextClosed (reason dispatched): one line is enough.
function onePerLaunch(events) {
  const launched = new Set(events.filter((e) => e.type === "Dispatched").map((e) => (e.payload || {}).context_id));
  return events.filter((e) => !(e.type === "ContextClosed" && (e.payload || {}).reason === "dispatched"
                                && launched.has((e.payload || {}).context_id)));
}

function eventLine(e) {
  const li = el("li");
  li.appendChild(el("span", clock(e.at) + " ", "dim"));
  li.appendChild(el("span", eventWords(e)));
  return li;
}

function decisionLine(d) {
  const li = el("li");
  li.appendChild(el("span", clock(d.at) + " ", "dim"));
  li.appendChild(itemLink(d.node_id));
  li.appendChild(el("span", " score " + d.score + (d.skipped ? " (skipped)" : "") + " · " + (d.reasons || []).join(", ")));
  return li;
}

// The server sends a snapshot when the town changes; running polecats' runtimes tick here meanwhile.
let receivedAt = Date.now();
setInterval(() => {
  if (!current || !(current.polecats || []).length) return;
  const late = (Date.now() - receivedAt) / 1000;
  drawPolecats({...current, polecats: current.polecats.map((p) => (
    typeof p.runtime_seconds === "number" ? {...p, runtime_seconds: p.runtime_seconds + late} : p))});
}, 1000);

function draw(snap) {
  current = snap;
  receivedAt = Date.now();
  drawHeader(snap);
  drawRigChoice(snap);
  drawQueue(snap);
  drawPolecats(snap);
  drawRuns(snap);
  drawRigs(snap);
  drawLog("events", onePerLaunch(snap.events).reverse().filter((e) => !rigFilter || !e.payload || !e.payload.rig || e.payload.rig === rigFilter), eventLine, "no events yet");
  drawLog("decisions", snap.decisions, decisionLine, "no decisions yet");
}

function connect() {
  const source = new EventSource("/api/events");
  source.addEventListener("state", (message) => draw(JSON.parse(message.data)));
  source.addEventListener("problem", (message) => say(JSON.parse(message.data).error, true));
  source.addEventListener("error", () => {
    const badge = document.getElementById("state");
    badge.textContent = "reconnecting…";
    badge.className = "badge offline";
  });
}

document.getElementById("pause").addEventListener("click", async () => {
  const done = await act("/api/pause");
  if (done) say(done.changed ? "paused" : "already paused");
});
document.getElementById("resume").addEventListener("click", async () => {
  const done = await act("/api/resume");
  if (done) say(done.changed ? "resumed" : "not paused");
});
document.getElementById("rig").addEventListener("change", (event) => {
  rigFilter = event.target.value;
  if (current) draw(current);
});
document.getElementById("token").value = sessionStorage.getItem(TOKEN_KEY) || "";
document.getElementById("token").addEventListener("change", (event) => sessionStorage.setItem(TOKEN_KEY, event.target.value));

fetch("/api/state").then((r) => r.json()).then((snap) => { if (!current) draw(snap); }).catch(() => {});
connect();
