// envoy-rls console: reads the admin API with the token kept in this
// tab's sessionStorage. Every value is put in the page as text, never as
// markup.
"use strict";

const tokenKey = "envoy-rls-admin-token";
const refreshMs = 5000;
let timer = null;
let lastStats = null;

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

// row makes a table row of cells: text (numeric ones right-aligned) or
// ready-made td elements.
function row(cells, numeric) {
  const tr = document.createElement("tr");
  cells.forEach((c, i) => tr.appendChild(c instanceof Node ? c : el("td", c, numeric && numeric.includes(i) ? "num" : "mono")));
  return tr;
}

function fill(tbody, rows, emptyText, cols) {
  tbody.replaceChildren();
  if (rows.length === 0) {
    const td = el("td", emptyText, "meta");
    td.colSpan = cols;
    const tr = document.createElement("tr");
    tr.appendChild(td);
    tbody.appendChild(tr);
    return;
  }
  rows.forEach((r) => tbody.appendChild(r));
}

class Unauthorized extends Error {}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + sessionStorage.getItem(tokenKey) };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, body, cache: "no-store", credentials: "omit" });
  if (resp.status === 401) throw new Unauthorized("the token was refused");
  const text = await resp.text();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { data = null; }
  if (!resp.ok) throw new Error((data && data.error) || text.trim() || resp.status + " " + resp.statusText);
  return data;
}

function setStatus(text, cls) {
  const s = $("status");
  s.textContent = text;
  s.className = cls || "meta";
}

function showLogin(message) {
  clearInterval(timer);
  timer = null;
  $("console").hidden = true;
  $("signout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  setStatus("");
}

async function showConsole() {
  $("login").hidden = true;
  $("console").hidden = false;
  $("signout").hidden = false;
  await refreshRules();
  await refreshLive();
  timer = setInterval(refreshLive, refreshMs);
}

// fmtRate writes a limit as its rule says it: "5 / minute", "5 / 15 minutes"
// (requests_per_unit per unit_multiplier units).
function fmtRate(perUnit, unit, multiplier) {
  if (multiplier > 1) return perUnit + " / " + multiplier + " " + unit + "s";
  return perUnit + " / " + unit;
}

function fmtLimit(r) {
  if (r.unlimited) return "unlimited";
  if (!r.requests_per_unit && !r.unit) return "";
  return fmtRate(r.requests_per_unit, r.unit, r.unit_multiplier);
}

// durationUnits are the units of fmtMs, largest first, in seconds.
const durationUnits = [[86400, "d"], [3600, "h"], [60, "m"], [1, "s"]];

// fmtMs writes a duration given in milliseconds as an operator reads it:
// "850 ms", "4.2s", "13m 56s", "2h 5m", "3d 4h": at most two units, the
// largest first, cut (not rounded) to the smaller; a trailing zero unit
// is left out ("2m", "1h"). The exact milliseconds go in the cell's title.
function fmtMs(ms) {
  if (ms === undefined || ms === null || !Number.isFinite(Number(ms))) return "";
  ms = Math.max(0, Math.floor(Number(ms)));
  if (ms < 1000) return ms + " ms";
  if (ms < 10000) return (Math.floor(ms / 100) / 10) + "s";
  let s = Math.floor(ms / 1000);
  const i = durationUnits.findIndex(([n]) => s >= n);
  const [big, bigName] = durationUnits[i];
  const out = [Math.floor(s / big) + bigName];
  s %= big;
  if (i + 1 < durationUnits.length) {
    const [small, smallName] = durationUnits[i + 1];
    if (Math.floor(s / small) > 0) out.push(Math.floor(s / small) + smallName);
  }
  return out.join(" ");
}

// fmtGoDuration shortens a Go duration string of the configuration without
// its zero tail: "10m0s" is "10m", "1h0m0s" is "1h", "1h30m0s" is "1h30m".
function fmtGoDuration(d) {
  return String(d).replace(/([hm])0s$/, "$1").replace(/h0m$/, "h");
}

// fmtReserve describes a rule's or a limit's reserve: ", reserve 500 for 10m",
// or "hits_addend" for an estimate of 0 (the request's own).
function fmtReserve(r) {
  if (!r.reserve) return "";
  return ", reserve " + (r.reserve.estimate || "hits_addend") + " for " + fmtGoDuration(r.reserve.ttl);
}

// durationCell is a table cell holding fmtMs(ms), with the exact value as
// its title.
function durationCell(ms, prefix, suffix) {
  const td = el("td", (prefix || "") + fmtMs(ms) + (suffix || ""), "num");
  td.title = ms + " ms";
  return td;
}

async function refreshRules() {
  const cfg = await api("GET", "/config");
  const meta = [];
  if (cfg.source && cfg.source.type) meta.push("rules from " + cfg.source.type + (cfg.source.server ? " " + cfg.source.server : ""));
  if (cfg.fingerprint) meta.push("fingerprint " + cfg.fingerprint);
  if (cfg.last_reload && cfg.last_reload.time) meta.push("last reload " + cfg.last_reload.time);
  meta.push("store: " + cfg.store);
  $("rules-meta").textContent = meta.join(" · ");
  const box = $("rules");
  box.replaceChildren();
  const select = $("explain-domain");
  select.replaceChildren();
  (cfg.domains || []).forEach((d) => {
    box.appendChild(el("h3", "domain " + d.domain + (d.file ? " (" + d.file + ")" : "")));
    const table = document.createElement("table");
    table.className = "rules";
    const head = document.createElement("tr");
    ["descriptor path", "policy ID", "limit", "algorithm", "source"].forEach((h) => head.appendChild(el("th", h)));
    const thead = document.createElement("thead");
    thead.appendChild(head);
    const tbody = document.createElement("tbody");
    fill(tbody, (d.rules || []).map((r) => row([r.path, r.policy_id || "", fmtLimit(r) + (r.shadow_mode ? " (shadow)" : "") + (r.penalty ? ", penalty " + fmtGoDuration(r.penalty.duration) : "") + fmtReserve(r), r.algorithm || "", r.source])), "no rules", 5);
    table.append(thead, tbody);
    box.appendChild(table);
    select.appendChild(el("option", d.domain));
  });
  if ((cfg.domains || []).length === 0) box.appendChild(el("p", "No rules loaded.", "meta"));
}

async function refreshLive() {
  try {
    await Promise.all([refreshStats(), refreshTop(), refreshDenials(), refreshRLQS()]);
    setStatus("updated " + new Date().toLocaleTimeString(), "ok");
  } catch (e) {
    if (e instanceof Unauthorized) { signOut("The token was refused (rotated?): sign in again."); return; }
    setStatus(e.message, "error");
  }
}

async function refreshStats() {
  const s = await api("GET", "/v1/stats");
  const prev = lastStats;
  const dt = prev ? (Date.parse(s.time) - Date.parse(prev.time)) / 1000 : 0;
  const before = {};
  if (prev) prev.policies.forEach((p) => { before[p.domain + "\u0000" + p.policy_id] = p; });
  const rate = (p, f) => {
    const b = before[p.domain + "\u0000" + p.policy_id];
    if (!b || dt <= 0) return "…";
    return ((p[f] - b[f]) / dt).toFixed(1);
  };
  fill($("stats").tBodies[0], s.policies.map((p) => row([p.domain, p.policy_id, rate(p, "decisions"), rate(p, "denials"),
    p.decisions, p.denials, p.shadow_denials, p.hits], [2, 3, 4, 5, 6, 7])), "no decision yet", 8);
  lastStats = s;
}

async function refreshTop() {
  const t = await api("GET", "/v1/top?n=10");
  $("top-meta").textContent = "The heaviest subjects by hits over the last " + Math.round(t.window_seconds) + " s, by subject digest (HMAC of the value).";
  fill($("top").tBodies[0], t.top.map((e) => row([e.domain, e.policy_id, e.key, e.subject_digest.slice(0, 16) + "…", e.hits, e.denied], [4, 5])), "no traffic tracked yet", 6);
}

// refreshRLQS shows the subjects this replica's RLQS service divides among
// proxies (GET /v1/rlqs): -1 (unknown) shows as "…".
async function refreshRLQS() {
  const q = await api("GET", "/v1/rlqs?limit=20");
  $("rlqs-meta").textContent = q.enabled
    ? q.streams + " proxy stream(s) on this replica; the subjects divided among proxies, by digest, the most subscribed first."
    : "RLQS is off on this replica (--rlqs=false).";
  const rps = (v) => (v < 0 ? "…" : v.toFixed(1));
  fill($("rlqs").tBodies[0], q.aggregates.map((a) => row([a.domain, a.policy_id, a.subject_digest.slice(0, 16) + "…", a.subscribers,
    rps(a.demand_rps), rps(a.assigned_rps), rps(a.capacity_rps)], [3, 4, 5, 6])), "no RLQS bucket reported yet", 7);
}

async function refreshDenials() {
  const d = await api("GET", "/v1/denials?n=20");
  if (d.sink === "off") {
    $("denials-meta").textContent = "The audit sink is off (--audit-sink): no denial events are kept.";
  } else {
    $("denials-meta").textContent = "The last denial events written to the " + d.sink + " audit sink (after sampling), newest first; this process holds " + d.kept + " of at most " + d.capacity + ".";
  }
  fill($("denials").tBodies[0], d.denials.map((e) => row([e.time, e.domain, e.policy_id, e.subject_digest.slice(0, 16) + "…", e.cost, e.limit,
    durationCell(e.retry_after_ms), e.shadow ? "yes" : "no", e.outcome], [4, 5])), d.sink === "off" ? "audit sink off" : "no denial yet", 9);
}

function parseDescriptors(text) {
  const lines = text.split("\n").map((l) => l.trim()).filter((l) => l !== "");
  return lines.map((line, i) => ({
    entries: line.split(",").map((part) => {
      const at = part.indexOf("=");
      if (at <= 0) throw new Error("line " + (i + 1) + ": want key=value, key2=value2");
      return { key: part.slice(0, at).trim(), value: part.slice(at + 1).trim() };
    }),
  }));
}

function showExplain(ans) {
  const out = $("explain-result");
  out.replaceChildren();
  ans.descriptors.forEach((d, i) => {
    const title = "descriptor " + (i + 1) + ": " + (d.matched ? (d.unlimited ? "matched, unlimited" : "matched " + (d.policy_id || "")) : "no match");
    out.appendChild(el("h3", title, d.matched ? "explain-matched" : "explain-unmatched"));
    if (d.rule) out.appendChild(el("p", "rule " + d.rule.path + " at " + d.rule.file + ":" + d.rule.line, "mono"));
    if (d.reason) out.appendChild(el("p", d.reason, "meta"));
    if (d.limits && d.limits.length > 0) {
      const table = document.createElement("table");
      table.className = "explain-limits";
      const head = document.createElement("tr");
      ["policy ID", "limit", "algorithm", "remaining", "reset", "allowed", "blocked"].forEach((h) => head.appendChild(el("th", h)));
      const thead = document.createElement("thead");
      thead.appendChild(head);
      const tbody = document.createElement("tbody");
      d.limits.forEach((l) => {
        const known = (v) => (v === undefined || v === null ? (l.state_error ? "?" : "") : v);
        const reset = l.reset_ms === undefined ? known() : durationCell(l.reset_ms);
        const blocked = l.blocked === undefined ? "" : l.blocked ? durationCell(l.blocked_ms, "yes, ", " left") : "no";
        // A reserving limit: what live reservations hold of what is used.
        const held = l.reserved === undefined ? "" : " (" + l.reserved + " reserved, " + l.charged + " charged)";
        tbody.appendChild(row([l.policy_id, fmtRate(l.requests_per_unit, l.unit, l.unit_multiplier) + fmtReserve(l), l.algorithm, known(l.remaining) + held, reset,
          l.allowed === undefined ? known() : l.allowed ? "yes" : "no", blocked]));
      });
      table.append(thead, tbody);
      out.appendChild(table);
      d.limits.filter((l) => l.state_error).forEach((l) => out.appendChild(el("p", "state of " + l.policy_id + ": " + l.state_error, "error")));
    }
  });
  const pre = el("pre", JSON.stringify(ans, null, 2));
  pre.id = "explain-json";
  out.appendChild(pre);
}

async function explain(ev) {
  ev.preventDefault();
  $("explain-error").textContent = "";
  try {
    const body = JSON.stringify({ domain: $("explain-domain").value, descriptors: parseDescriptors($("explain-descriptors").value) });
    showExplain(await api("POST", "/v1/explain", body));
  } catch (e) {
    if (e instanceof Unauthorized) { signOut("The token was refused: sign in again."); return; }
    $("explain-error").textContent = e.message;
  }
}

async function signIn(ev) {
  ev.preventDefault();
  const input = $("token");
  sessionStorage.setItem(tokenKey, input.value.trim());
  input.value = "";
  try {
    await api("GET", "/v1/stats");
  } catch (e) {
    sessionStorage.removeItem(tokenKey);
    showLogin(e instanceof Unauthorized ? "The token was refused." : e.message);
    return;
  }
  try { await showConsole(); } catch (e) { setStatus(e.message, "error"); }
}

function signOut(message) {
  sessionStorage.removeItem(tokenKey);
  lastStats = null;
  showLogin(typeof message === "string" ? message : "");
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", signIn);
  $("explain-form").addEventListener("submit", explain);
  $("signout").addEventListener("click", () => signOut(""));
  if (sessionStorage.getItem(tokenKey)) {
    showConsole().catch((e) => (e instanceof Unauthorized ? signOut("The token was refused: sign in again.") : setStatus(e.message, "error")));
  } else {
    showLogin("");
  }
});
