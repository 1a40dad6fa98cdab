// One item: its score breakdown and reasons (GET /api/explain/{item}).
"use strict";

function fill(list, entries, empty) {
  clear(list);
  if (!entries.length) { list.appendChild(el("li", empty, "dim")); return; }
  for (const entry of entries) list.appendChild(entry instanceof Node ? entry : el("li", entry));
}

async function load() {
  const id = decodeURIComponent(location.pathname.split("/").pop());
  document.getElementById("item-id").textContent = id;
  document.title = "sluice · " + id;
  const response = await fetch("/api/explain/" + encodeURIComponent(id));
  const data = await response.json();
  if (!response.ok) { say(data.error, true); return; }
  const item = data.item;
  document.getElementById("item-title").textContent = item.title || "";
  document.getElementById("score").textContent = data.score === null ? "-" : String(data.score);
  document.getElementById("queued").textContent = data.queued
    ? (data.blocked ? "queued, blocked" : "queued, ready") + (data.queue_row && data.queue_row.why ? " · " + [].concat(data.queue_row.why).join(" ") : "")
    : "not queued (scored as if slung now)";
  fill(document.getElementById("reasons"), data.reasons, "none");
  const explain = data.explain;
  const why = explain ? explain.reasons.map((r) => r.code + (r.detail ? ": " + r.detail : "")) : [];
  fill(document.getElementById("why"), why, explain && explain.would_dispatch ? "nothing: the next cycle launches it" : "nothing");
  fill(document.getElementById("blockers"), data.blocked_by.map((b) => {
    const li = el("li");
    const a = el("a", b);
    a.href = "/item/" + encodeURIComponent(b);
    li.appendChild(a);
    return li;
  }), "nothing");
  const facts = document.querySelector("#facts tbody");
  clear(facts);
  const shown = { rig: data.rig, status: item.status, priority: item.priority, type: item.issue_type,
                  assignee: item.assignee, graph: data.graph_id, tokens: data.tokens, created: item.created_at,
                  updated: item.updated_at, labels: (item.labels || []).join(", "),
                  due: data.due ? data.due + " (" + data.due_at + ")" : null,
                  estimated: data.estimated_minutes === null ? null : data.estimated_minutes + " min",
                  gate: data.gate ? (data.gate.await_type || "gate") + (data.gate.await_id ? " " + data.gate.await_id : "")
                    + (data.gate.timeout ? ", timeout " + data.gate.timeout : "") : null };
  for (const [k, v] of Object.entries(shown)) {
    if (v === undefined || v === null || v === "") continue;
    const tr = el("tr");
    tr.appendChild(el("th", k));
    tr.appendChild(el("td", v));
    facts.appendChild(tr);
  }
  fill(document.getElementById("item-polecats"), data.polecats.map((p) =>
    el("li", p.id + " · " + p.state + " · started " + p.started_at + " · " + (p.attach || p.logs_command))), "none");
  fill(document.getElementById("item-decisions"), data.decisions.map((d) =>
    el("li", clock(d.at) + " score " + d.score + " · " + (d.reasons || []).join(", "))), "none");
}

load();
