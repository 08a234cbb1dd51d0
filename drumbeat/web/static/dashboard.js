// drumbeat's dashboard. It talks to the server that served it and nothing else:
// GET /api/events (a snapshot a second, server-sent events read over fetch so that a
// token can go in the Authorization header), /api/history, /api/host/NAME, and the
// control calls. The token stays in this tab (sessionStorage) and is sent only as
// "Authorization: Bearer" to this origin.
"use strict";

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("drumbeat-token") || "";
let span = "hour";
let history = null; // {period_s, start, pages: [], bytes: []}
let lastSnapshot = null;
const HOUR_POINTS = 3600;
const RECENT_SHOWN = 12;

function authHeaders(extra) {
  const h = Object.assign({}, extra || {});
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

// ---- formatting -----------------------------------------------------------

function num(n, digits) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  const a = Math.abs(n);
  const d = digits === undefined ? 1 : digits;
  if (a >= 1e9) return (n / 1e9).toFixed(d) + " G";
  if (a >= 1e6) return (n / 1e6).toFixed(d) + " M";
  if (a >= 1e4) return (n / 1e3).toFixed(d) + " k";
  return Number.isInteger(n) ? String(n) : n.toFixed(d);
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(Math.round(n))) + " " + units[i];
}

function duration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  return m + "m " + sec + "s";
}

function clock(t) {
  const d = new Date(t * 1000);
  return d.toLocaleTimeString([], { hour12: false });
}

// ---- tables (built with DOM calls: nothing from the crawl is parsed as HTML) ---

function fillKV(table, rows) {
  table.replaceChildren(...rows.map(([k, v]) => {
    const tr = document.createElement("tr");
    const a = document.createElement("td"), b = document.createElement("td");
    a.textContent = k; b.textContent = v; b.className = "n";
    tr.append(a, b);
    return tr;
  }));
}

function fillList(table, head, rows, numeric) {
  const thead = document.createElement("tr");
  head.forEach((h, i) => {
    const th = document.createElement("th");
    th.textContent = h;
    if (numeric && numeric[i]) th.className = "n";
    thead.append(th);
  });
  const trs = rows.map((r) => {
    const tr = document.createElement("tr");
    r.forEach((v, i) => {
      const td = document.createElement("td");
      td.textContent = v;
      if (numeric && numeric[i]) td.className = "n";
      tr.append(td);
    });
    return tr;
  });
  if (!rows.length) {
    const tr = document.createElement("tr"), td = document.createElement("td");
    td.textContent = "none"; td.colSpan = head.length; tr.append(td); trs.push(tr);
  }
  table.replaceChildren(thead, ...trs);
}

// ---- charts: a small canvas line chart -------------------------------------

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function drawChart(canvas, start, period, values, color, fmt) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (!w || !h) return;
  if (canvas.width !== w * dpr || canvas.height !== h * dpr) {
    canvas.width = w * dpr; canvas.height = h * dpr;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const left = 68, right = 8, top = 8, bottom = 20;
  const pw = w - left - right, ph = h - top - bottom;
  const n = values.length;
  const max = niceMax(Math.max(0, ...values));
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#6b7385";
  ctx.strokeStyle = "#dde1e8";
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let i = 0; i <= 4; i++) {
    const y = top + ph - (ph * i) / 4;
    ctx.beginPath(); ctx.moveTo(left, y + 0.5); ctx.lineTo(left + pw, y + 0.5); ctx.stroke();
    ctx.fillText(fmt((max * i) / 4), left - 6, y);
  }
  if (n < 1) return;
  const span = Math.max(1, n - 1);
  const x = (i) => left + (pw * i) / span;
  const y = (v) => top + ph - (ph * v) / max;
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const ticks = Math.min(5, n);
  for (let k = 0; k < ticks; k++) {
    const i = Math.round((span * k) / Math.max(1, ticks - 1));
    const t = start + i * period;
    const label = period >= 86400 ? new Date(t * 1000).toLocaleDateString()
      : period >= 3600 ? new Date(t * 1000).toLocaleDateString([], { month: "short", day: "numeric" })
      : n * period <= 600 ? clock(t) : clock(t).slice(0, 5);
    ctx.fillText(label, Math.min(Math.max(x(i), left + 20), left + pw - 20), top + ph + 4);
  }
  ctx.beginPath();
  ctx.moveTo(x(0), y(values[0]));
  for (let i = 1; i < n; i++) ctx.lineTo(x(i), y(values[i]));
  ctx.strokeStyle = color; ctx.lineWidth = 1.5; ctx.stroke();
  ctx.lineTo(x(n - 1), top + ph); ctx.lineTo(x(0), top + ph); ctx.closePath();
  ctx.globalAlpha = 0.12; ctx.fillStyle = color; ctx.fill(); ctx.globalAlpha = 1;
}

function drawCharts() {
  if (!history) return;
  const p = history.period_s;
  // The newest bucket is still filling: left out, or every chart would end in a dip.
  const full = Math.max(1, history.pages.length - 1);
  const pages = history.pages.slice(0, full).map((v) => v / p);
  const bytesPer = history.bytes.slice(0, full).map((v) => v / p);
  drawChart($("chart-pages"), history.start, p, pages, "#2f6fde", (v) => num(v, 0));
  drawChart($("chart-bytes"), history.start, p, bytesPer, "#d9822b", (v) => bytes(v));
}

async function loadHistory() {
  try {
    const r = await fetch("/api/history?span=" + encodeURIComponent(span),
      { headers: authHeaders() });
    if (!r.ok) return;
    const doc = await r.json();
    history = {
      period_s: doc.period_s, start: doc.start,
      pages: doc.series.pages, bytes: doc.series.bytes,
    };
    drawCharts();
  } catch (e) {
    // offline: the event stream says so
  }
}

// The per-second chart follows the snapshots' last seconds.
function mergeRecent(recent) {
  if (!history || span !== "hour" || !recent || recent.period_s !== 1) return;
  const rs = recent.series;
  for (let i = 0; i < rs.pages.length; i++) {
    const t = recent.start + i;
    if (t < history.start) continue;
    const at = t - history.start;
    while (history.pages.length < at) { history.pages.push(0); history.bytes.push(0); }
    if (at < history.pages.length) {
      history.pages[at] = rs.pages[i]; history.bytes[at] = rs.bytes[i];
    } else {
      history.pages.push(rs.pages[i]); history.bytes.push(rs.bytes[i]);
    }
  }
  const extra = history.pages.length - HOUR_POINTS;
  if (extra > 0) {
    history.pages.splice(0, extra); history.bytes.splice(0, extra); history.start += extra;
  }
  drawCharts();
}

// ---- the snapshot ------------------------------------------------------------

function render(s) {
  lastSnapshot = s;
  if (s.mode === "cluster") { renderCluster(s); return; }
  const c = s.controls;
  const state = c.stopping ? "stopping" : c.paused ? "paused" : "running";
  $("state").textContent = state;
  $("state").className = "badge " + state;
  $("pages-done").textContent = num(s.pages_done, 2);
  $("pages-rate").textContent = num(s.rates.pages_per_s_5s, 1);
  $("bytes-rate").textContent = bytes(s.rates.bytes_per_s_5s);
  $("in-flight").textContent = num(s.in_flight);
  $("seen").textContent = num(s.seen, 2);
  $("elapsed").textContent = duration(s.elapsed_s);
  $("updated").textContent = clock(s.time);

  const q = s.queued;
  fillKV($("queues"), [
    ["RAM (politeness scheduler)", num(q.ram)],
    ["read from BEAST, to route", num(q.to_route)],
    ["BEAST queues (disk)", num(q.beast)],
    ["BEAST ring: queue being read / queues", s.beast.current + " / " + s.beast.queues],
    ["BEAST QF (over budget)", num(s.beast.qf)],
    ["QR: waiting for robots.txt", num(q.qr)],
    ["QR retry (robots.txt failed)", num(q.qr_retry)],
    ["robots.txt to fetch", num(q.robots_todo)],
    ["robots checks under way", num(q.robots_check)],
    ["DNS lookups under way", num(s.resolving)],
  ]);

  if (s.hosts) {
    $("hosts-total").textContent = num(s.hosts.total) + " hosts"
      + (s.hosts.estimated ? " (states estimated from a sample)" : "");
    const b = s.hosts.by_state;
    const order = ["ready", "in_flight", "waiting", "waiting_for_ip", "backed_off",
      "robots", "resolving", "paused", "idle"];
    fillKV($("hosts"), order.filter((k) => k in b).map((k) => [k.replace(/_/g, " "), num(b[k])]));
    fillList($("top-hosts"), ["host", "queued", "budget", "delay s", "state"],
      s.top_hosts.map((h) => [h.host, num(h.queued), num(h.budget), h.delay_s,
        h.state + (h.failure ? " (" + h.failure + ")" : "")]),
      [false, true, true, true, false]);
    fillList($("top-plds"), ["PLD", "in-degree", "budget"],
      s.top_plds.map((p) => [p.pld, num(p.indegree), num(p.budget)]), [false, true, true]);
    if (!s.top_plds.length) {
      fillList($("top-plds"), ["PLD", "in-degree", "budget"],
        [["every PLD", "≤ floor", num(s.default_budget)]], [false, true, true]);
    }
  }

  const rows = [];
  for (const [k, v] of Object.entries(s.status_classes)) rows.push(["HTTP " + k, num(v)]);
  for (const [k, v] of Object.entries(s.errors)) rows.push(["error: " + k, num(v)]);
  for (const [k, v] of Object.entries(s.dropped)) rows.push(["dropped: " + k, num(v)]);
  fillKV($("errors"), rows);
  fillList($("recent-errors"), ["time", "what", "reason", "URL"],
    s.recent_errors.slice(0, RECENT_SHOWN).map((e) => [clock(e.time), e.kind, e.reason, e.url]));

  fillList($("drums"),
    ["DRUM", "keys", "pending", "merges", "α(n,R)", "b·l bytes/page", "W", "S pages/s"],
    s.drums.map((d) => [d.name, num(d.keys, 2), num(d.pending), num(d.merges), d.alpha,
      d.checked_bytes_per_page === null ? "–" : num(d.checked_bytes_per_page),
      d.disk_bytes_per_s === null ? "–" : bytes(d.disk_bytes_per_s) + "/s",
      d.sustainable_pages_per_s === null ? "–" : num(d.sustainable_pages_per_s)]),
    [false, true, true, true, true, true, true, true]);

  $("speed-now").textContent = c.pages_per_s === null ? "no ceiling"
    : "ceiling " + c.pages_per_s + " pages/s";
  renderBlocks(c.blocks);
  mergeRecent(s.recent);
}

// A cluster (drumbeat web --redis): read-only, its crawls and fetchers.
function renderCluster(s) {
  for (const el of document.querySelectorAll(".crawl-only")) el.hidden = true;
  for (const el of document.querySelectorAll(".cluster-only")) el.hidden = false;
  if (s.error) { offline(s.error); return; }
  $("state").textContent = s.crawl ? "crawl " + s.crawl : "cluster";
  $("state").className = "badge running";
  const sum = (key) => s.crawls.reduce((a, c) => a + (c[key] || 0), 0);
  $("pages-done").textContent = num(s.pages_done, 2);
  $("pages-rate").textContent = num(s.rates.pages_per_s, 1);
  $("bytes-rate").textContent = bytes(s.rates.bytes_per_s);
  $("in-flight-label").textContent = "in flight";
  $("in-flight").textContent = num(sum("in_flight"));
  $("seen").textContent = num(sum("seen"), 2);
  $("elapsed-label").textContent = "fetchers";
  $("elapsed").textContent = String(s.fetchers.length);
  $("updated").textContent = clock(s.time);
  $("redis").textContent = (s.redis || "") + (s.redis_used_memory
    ? ", " + bytes(s.redis_used_memory) + " used" : "");
  fillList($("crawls"),
    ["crawl", "managers", "pages", "pages/s", "in flight", "queued", "seen", "hosts",
      "tasks pending", "state"],
    s.crawls.map((c) => [c.crawl, c.managers_alive + "/" + c.partitions, num(c.pages_done, 2),
      num(c.pages_per_s, 1), num(c.in_flight), num(c.queued), num(c.seen, 2), num(c.hosts),
      num(c.tasks_pending), c.done ? "done" : "crawling"]),
    [false, true, true, true, true, true, true, true, true, false]);
  fillList($("fetchers"), ["fetcher", "last heartbeat s", "tasks held"],
    s.fetchers.map((f) => [f.name, f.last_heartbeat_s, num(f.tasks_held)]),
    [false, true, true]);
}

function renderBlocks(blocks) {
  const items = [];
  for (const [kind, key] of [["host", "hosts"], ["pld", "plds"], ["regex", "regexes"]]) {
    for (const value of blocks[key] || []) {
      const li = document.createElement("li");
      li.textContent = kind + ": " + value;
      const b = document.createElement("button");
      b.textContent = "unblock";
      b.addEventListener("click", () => control("DELETE", "/api/block", { [kind]: value }));
      li.append(b);
      items.push(li);
    }
  }
  $("blocks").replaceChildren(...items);
}

// ---- the event stream ---------------------------------------------------------

async function follow() {
  for (;;) {
    try {
      const r = await fetch("/api/events", { headers: authHeaders(), cache: "no-store" });
      if (r.status === 401) {
        offline("the token is needed to read (not loopback)");
        await sleep(3000);
        continue;
      }
      if (!r.ok || !r.body) throw new Error("HTTP " + r.status);
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = event.split("\n").filter((l) => l.startsWith("data: "))
            .map((l) => l.slice(6)).join("\n");
          if (data) render(JSON.parse(data));
        }
      }
    } catch (e) {
      // the crawl stopped or the network failed: try again shortly
    }
    offline("not connected");
    await sleep(2000);
  }
}

function offline(why) {
  $("state").textContent = why;
  $("state").className = "badge offline";
}

function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

// ---- controls and the host search ------------------------------------------

function say(text, bad) {
  $("control-result").textContent = text;
  $("control-result").className = bad ? "hint error" : "hint";
}

async function control(method, path, body) {
  if (!token) { say("give the token first (STATE/web.token)", true); return; }
  const init = { method, headers: authHeaders() };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  try {
    const r = await fetch(path, init);
    const doc = await r.json();
    if (!r.ok) say(method + " " + path + ": " + (doc.error || r.status), true);
    else {
      say(method + " " + path + ": done");
      if (doc.blocks) renderBlocks(doc.blocks);
    }
  } catch (e) {
    say(method + " " + path + ": no answer", true);
  }
}

async function askHost(event) {
  event.preventDefault();
  const name = $("host-name").value.trim();
  if (!name) return;
  try {
    const r = await fetch("/api/host/" + encodeURIComponent(name), { headers: authHeaders() });
    const doc = await r.json();
    if (!r.ok) { fillKV($("host-answer"), [["error", doc.error || r.status]]); return; }
    const rows = [["state", doc.state]];
    for (const [k, v] of Object.entries(doc)) {
      if (k === "state") continue;
      const shown = k === "until" ? new Date(v * 1000).toLocaleString()
        : Array.isArray(v) ? v.join(", ") : v === null ? "–" : String(v);
      rows.push([k.replace(/_/g, " "), shown]);
    }
    fillKV($("host-answer"), rows);
  } catch (e) {
    fillKV($("host-answer"), [["error", "no answer"]]);
  }
}

function wire() {
  $("token").value = token;
  $("token-save").addEventListener("click", () => {
    token = $("token").value.trim();
    if (token) sessionStorage.setItem("drumbeat-token", token);
    else sessionStorage.removeItem("drumbeat-token");
    say(token ? "token set" : "token cleared");
    if (!history) loadHistory(); // off loopback, reads need it too
  });
  $("pause").addEventListener("click", () => control("POST", "/api/pause"));
  $("resume").addEventListener("click", () => control("POST", "/api/resume"));
  $("checkpoint").addEventListener("click", () => control("POST", "/api/checkpoint"));
  $("stop").addEventListener("click", () => {
    if (window.confirm("Stop the crawl (gracefully, with a last checkpoint)?")) {
      control("POST", "/api/stop");
    }
  });
  $("speed-set").addEventListener("click", () => {
    const v = parseFloat($("speed").value);
    if (!(v > 0)) { say("speed: a number of pages/s above 0", true); return; }
    control("PUT", "/api/speed", { pages_per_s: v });
  });
  $("speed-clear").addEventListener("click", () => control("PUT", "/api/speed", { pages_per_s: null }));
  $("block-add").addEventListener("click", () => {
    const v = $("block-value").value.trim();
    if (!v) return;
    control("POST", "/api/block", { [$("block-kind").value]: v });
  });
  $("host-form").addEventListener("submit", askHost);
  $("span").addEventListener("change", () => { span = $("span").value; loadHistory(); });
  window.addEventListener("resize", drawCharts);
  // Per-second history follows the snapshots; coarser buckets are read again a minute.
  setInterval(() => { if (!history || history.period_s > 1) loadHistory(); }, 60000);
}

wire();
loadHistory();
follow();
