// One item: its score breakdown and reasons (GET /api/explain/{item}).
"use strict";

function fill(list, entries, empty) {
  clear(list);
  if (!entries.length) { list.appendChild(el("li", empty, "dim")); return; }
  for (const entry of entries) list.appendChild(entry instanceof Node ? entry : el("li", entry));
}

function hhmm(stamp) {
  return stamp ? String(stamp).slice(11, 16) + " UTC" : "-";
}

// What `scheduler explain` says of the item's forecast: when it would start and finish, from what.
function forecastText(e) {
  if (e.start_at) {
    const basis = e.basis ? (e.basis.samples ? e.basis.samples + " runs of " + e.basis.kind : e.basis.level) : "";
    return "start ≈" + hhmm(e.start_at) + ", done ≈" + hhmm(e.done_at) + " (p90 " + hhmm(e.done_p90_at) + ")"
      + (basis ? ", from " + basis : "");
  }
  return e.eta_why ? "cannot start yet (" + e.eta_why + ")" : null;
}

function budgetText(b) {
  const whose = b.scope === "town" ? "the town's budget" : "rig " + b.scope + "'s budget";
  if (b.fits) return "p90 " + b.tokens_p90 + " tokens fit the " + b.remaining + " left of " + whose;
  if (!b.room_at) return "p90 " + b.tokens_p90 + " tokens exceed " + whose + " (" + b.budget + " per " + b.window + ")";
  return "p90 " + b.tokens_p90 + " tokens do not fit the " + b.remaining + " left of " + whose + "; room ≈" + hhmm(b.room_at);
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
                  forecast: explain ? forecastText(explain) : null,
                  "budget fit": explain && explain.budget ? budgetText(explain.budget) : null,
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
