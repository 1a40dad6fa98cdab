// Shared by the dashboard pages.  Every piece of data reaches the page through
// textContent, never as HTML: titles are written by agents.
"use strict";

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function clock(stamp) {
  return stamp ? String(stamp).slice(11, 19) : "";
}

function runtime(seconds) {
  if (seconds === null || seconds === undefined) return "?";
  const s = Math.floor(seconds);
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
}

// The token: from the start-up URL's #token=… (then dropped from the address bar), or typed in.
const TOKEN_KEY = "sluice-token";
function takeTokenFromUrl() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    const value = decodeURIComponent(match[1]);
    sessionStorage.setItem(TOKEN_KEY, value);
    history.replaceState(null, "", location.pathname + location.search);
    const input = document.getElementById("token");
    if (input) input.value = value;
    say("token taken from the address");
  }
}
// A token link pasted into a tab already showing the page changes only the hash: take it then too.
window.addEventListener("hashchange", takeTokenFromUrl);

// A table with no rows says so in one row across its columns.
function emptyRow(body, columns, text) {
  const tr = el("tr");
  const td = el("td", text, "empty");
  td.colSpan = columns;
  tr.appendChild(td);
  body.appendChild(tr);
}
function token() {
  const input = document.getElementById("token");
  if (input && input.value) return input.value;
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function say(text, isError) {
  const box = document.getElementById("message");
  if (!box) return;
  box.textContent = text;
  box.className = isError ? "error" : "";
}

async function act(path, body) {
  const headers = { "Content-Type": "application/json" };
  const t = token();
  if (t) headers["Authorization"] = "Bearer " + t;
  const response = await fetch(path, { method: "POST", headers, body: JSON.stringify(body || {}) });
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    const why = data && data.error ? data.error : response.statusText;
    say("refused (" + response.status + "): " + why, true);
    return null;
  }
  return data;
}

takeTokenFromUrl();
