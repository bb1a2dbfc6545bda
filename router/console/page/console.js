// agent-router console: the overview, the live tail of calls and the sessions, read from the
// console's API (/console/api). Calls are pushed (SSE over fetch, so that the admin key travels in
// a header, never in a URL); nothing polls. Every value reaches the page as text (no innerHTML).

const API = "/console/api";
const KEY = "agent-router-admin-key";
const MAX_ROWS = 500; // calls kept in the tail's table
const state = { calls: [], picked: null, session: null, tiers: [], baseline: null, paused: false };

// -- helpers ---------------------------------------------------------------------------------------
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
    else if (k === "data") Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined && c !== "") node.append(c instanceof Node ? c : String(c));
  return node;
}
export function usd(x) {
  if (x === null || x === undefined) return "–";
  const digits = Math.abs(x) >= 1 ? 2 : Math.abs(x) >= 0.01 ? 4 : 6;
  return (x < 0 ? "-$" : "$") + Math.abs(x).toFixed(digits);
}
const time = (ts) => new Date(ts * 1000).toLocaleTimeString();
const short = (id) => (id && id.length > 12 ? id.slice(0, 12) + "…" : id || "–");
function tierChip(tier) {
  const i = state.tiers.indexOf(tier);
  return el("span", { class: `chip t${i >= 0 ? (i % 4) + 1 : 1}` }, tier);
}
function headers() {
  const key = sessionStorage.getItem(KEY);
  return key ? { "x-admin-key": key } : {};
}
async function api(path) {
  const r = await fetch(API + path, { headers: headers() });
  if (r.status === 401) { askKey(); throw new Error("the admin key is needed"); }
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}
function askKey() {
  const dialog = document.getElementById("key");
  if (dialog.open) return;
  dialog.showModal();
  dialog.addEventListener("close", () => {
    sessionStorage.setItem(KEY, document.getElementById("key-input").value);
    start();
  }, { once: true });
}
function throttled(fn, ms) {
  let last = 0, timer = null;
  return () => {
    const wait = last + ms - Date.now();
    if (wait <= 0) { last = Date.now(); fn(); } else if (!timer) timer = setTimeout(() => { timer = null; last = Date.now(); fn(); }, wait);
  };
}

// -- overview --------------------------------------------------------------------------------------
async function overview() {
  const [ov, series] = await Promise.all([api("/overview"), api(`/series?since=${Date.now() / 1000 - 3600}&bucket=60`)]);
  state.tiers = ov.tiers.map((t) => t.name);
  state.baseline = ov.baseline;
  const calls = Object.values(ov.calls).reduce((a, b) => a + b, 0);
  const onBaseline = ov.baseline ? ov.calls[ov.baseline] || 0 : 0;
  const mistakes = Object.values(ov.mistakes).reduce((a, b) => a + b, 0);
  set("ov-calls", calls);
  set("ov-saved", usd(ov.saved_usd), { usd: ov.saved_usd });
  set("ov-cost", usd(ov.cost_usd), { usd: ov.cost_usd });
  set("ov-baseline", usd(ov.baseline_cost_usd), { usd: ov.baseline_cost_usd });
  set("ov-share", calls ? `${Math.round((100 * onBaseline) / calls)}%` : "–");
  set("ov-escalated", ov.escalated);
  set("ov-mistakes", mistakes);
  set("ov-basis", ov.baseline ? `(costs set against ${ov.baseline})` : "(no baseline tier)");
  const kinds = document.getElementById("ov-kinds");
  const most = Math.max(1, ...Object.values(ov.mistakes));
  kinds.replaceChildren(...Object.entries(ov.mistakes).sort((a, b) => b[1] - a[1]).map(([kind, n]) =>
    el("li", {}, el("span", {}, kind), el("i", { style: `width:${(100 * n) / most}%` }), el("b", {}, n))));
  if (!Object.keys(ov.mistakes).length) kinds.replaceChildren(el("li", { class: "hint" }, "none caught yet"));
  document.querySelector("#ov-tiers tbody").replaceChildren(...ov.tiers.map((t) => el("tr", {},
    el("td", {}, tierChip(t.name)), el("td", {}, t.model), el("td", {}, t.price), el("td", {}, t.breaker),
    el("td", { class: "num" }, t.context_window ?? "–"),
    el("td", { class: "num" }, t.ttft_ms == null ? "–" : `${t.ttft_ms} ms`),
    el("td", { class: "num" }, t.prefix_reused == null ? "–" : `${Math.round(100 * t.prefix_reused)}%`),
    el("td", { class: "num" }, ov.calls[t.name] || 0))));
  set("ov-note", `${ov.sessions} sessions kept; ${ov.unpriced} calls without a known cost are left out of the sums. ${ov.access}.`);
  chart(series.rows);
}
function set(id, text, data) {
  const node = document.getElementById(id);
  node.textContent = text;
  if (data) Object.assign(node.dataset, data);
}
function chart(rows) {
  const canvas = document.getElementById("chart");
  const ctx = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height, pad = 28;
  ctx.clearRect(0, 0, W, H);
  const now = Math.floor(Date.now() / 60000) * 60, start = now - 3540;
  const lines = {};
  for (const [bucket, tier, , tool, kind, n] of rows) {
    if (kind || tool) continue; // answers only
    const i = Math.round((bucket - start) / 60);
    if (i < 0 || i > 59) continue;
    (lines[tier] ||= new Array(60).fill(0))[i] += n;
  }
  const top = Math.max(1, ...Object.values(lines).flat());
  ctx.strokeStyle = "#e4e7ec"; ctx.fillStyle = "#667085"; ctx.font = "11px system-ui";
  for (const f of [0, 0.5, 1]) {
    const y = H - pad - f * (H - 2 * pad);
    ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(W - 8, y); ctx.stroke();
    ctx.fillText(String(Math.round(f * top)), 2, y + 4);
  }
  const colours = ["#12b76a", "#2f54eb", "#f79009", "#9e77ed"];
  const legend = [];
  for (const [tier, values] of Object.entries(lines)) {
    const c = colours[Math.max(0, state.tiers.indexOf(tier)) % 4];
    ctx.strokeStyle = c; ctx.lineWidth = 2; ctx.beginPath();
    values.forEach((v, i) => {
      const x = pad + (i * (W - pad - 8)) / 59, y = H - pad - (v / top) * (H - 2 * pad);
      i ? ctx.lineTo(x, y) : ctx.moveTo(x, y);
    });
    ctx.stroke();
    legend.push(el("span", {}, el("i", { style: `background:${c}` }), tier));
  }
  document.getElementById("legend").replaceChildren(...legend);
}

// -- the live tail ----------------------------------------------------------------------------------
function filters() {
  const form = new FormData(document.getElementById("filters"));
  return { session: form.get("session"), tier: form.get("tier"), route: form.get("route"), mistake: form.get("mistake") };
}
function shows(call, f) {
  return (!f.session || (call.session || "").includes(f.session)) && (!f.tier || call.tried.includes(f.tier))
    && (!f.route || call.route.includes(f.route)) && (!f.mistake || call.mistakes.some((m) => m.includes(f.mistake)));
}
function row(call, fresh) {
  const chain = [];
  call.tried.forEach((t, i) => { if (i) chain.push(el("span", { class: "arrow" }, "→")); chain.push(tierChip(t)); });
  const tr = el("tr", { class: fresh ? "fresh" : "", data: { id: call.id }, on: { click: () => pick(call, tr) } },
    el("td", {}, time(call.ts)), el("td", { title: call.session }, short(call.session)), el("td", {}, call.route),
    el("td", {}, chain), el("td", {}, call.mistakes.map((m) => el("span", { class: "chip mistake" }, m)),
      call.error ? el("span", { class: "chip error" }, call.error) : null),
    el("td", { class: "num" }, call.tokens.prompt + call.tokens.output),
    el("td", { class: "num" }, usd(call.cost_usd)), el("td", { class: "num" }, usd(call.baseline_cost_usd)),
    el("td", { class: "num" }, call.seconds.toFixed(2)));
  return tr;
}
function renderTail() {
  const f = filters();
  const shown = state.calls.filter((c) => shows(c, f));
  document.querySelector("#tail tbody").replaceChildren(...shown.map((c) => row(c, false)));
  document.getElementById("shown").textContent = `${shown.length} of ${state.calls.length} calls`;
}
function arrived(call) {
  state.calls.unshift(call);
  state.calls.length = Math.min(state.calls.length, MAX_ROWS);
  if (state.paused) return;
  const tbody = document.querySelector("#tail tbody");
  if (shows(call, filters())) tbody.prepend(row(call, true));
  while (tbody.children.length > MAX_ROWS) tbody.lastChild.remove();
  document.getElementById("shown").textContent = `${tbody.children.length} of ${state.calls.length} calls`;
}
function pick(call, tr) {
  document.querySelectorAll("#tail tr.picked").forEach((r) => r.classList.remove("picked"));
  tr.classList.add("picked");
  document.getElementById("detail").replaceChildren(...chainOf(call).filter(Boolean));
}
function chainOf(call) {
  const steps = [el("li", {}, el("b", {}, `route ${call.route}`), el("small", {}, call.reason))];
  for (const a of call.attempts) {
    const tokens = a.usage ? `${a.usage.evaluated + a.usage.reused} in (${a.usage.reused} cached), ${a.usage.output} out` : "no token counts";
    steps.push(el("li", { class: a.how }, tierChip(a.tier), ` ${a.how}`,
      a.mistakes.length ? el("span", {}, " · ", a.mistakes.map((m) => el("span", { class: "chip mistake" }, m))) : null,
      el("small", {}, `${a.started} → ${a.ended ?? "…"} ms · ${tokens}`)));
  }
  steps.push(call.error
    ? el("li", { class: "failed" }, el("b", {}, `ended with ${call.error}`), el("small", {}, "the agent got this error, no answer"))
    : el("li", { class: "answered" }, el("b", {}, "delivered by "), tierChip(call.tier),
      call.signs.length ? ` with signs ${call.signs.join(", ")}` : "", call.salvaged ? " (salvaged)" : ""));
  return [
    el("h3", {}, `Call ${short(call.id)}`), el("p", { class: "hint" }, `session ${call.session} · ${time(call.ts)}`),
    el("ol", { class: "chain" }, steps),
    el("dl", {}, el("dt", {}, "cost"), el("dd", {}, usd(call.cost_usd)),
      el("dt", {}, "baseline"), el("dd", {}, usd(call.baseline_cost_usd)),
      el("dt", {}, "took"), el("dd", {}, `${call.seconds.toFixed(3)} s`),
      el("dt", {}, "baseline time"), el("dd", {}, call.baseline_seconds == null ? "–" : `${call.baseline_seconds.toFixed(3)} s`),
      el("dt", {}, "tokens"), el("dd", {}, `${call.tokens.prompt} prompt (${call.tokens.cached} cached), ${call.tokens.output} output`)),
    call.worth_unknown ? el("p", { class: "note" }, call.worth_unknown) : null,
  ];
}

let live = null;
async function listen(delay = 1000) {
  const badge = document.getElementById("live");
  try {
    const r = await fetch(API + "/calls/live", { headers: headers(), cache: "no-store" });
    if (r.status === 401) { askKey(); return; }
    if (!r.ok || !r.body) throw new Error(String(r.status));
    badge.textContent = "live"; badge.classList.remove("off");
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (event.startsWith("data: ")) { const call = JSON.parse(event.slice(6)); arrived(call); refresh(); }
      }
    }
    delay = 1000;
  } catch (e) { /* reconnect below */ }
  badge.textContent = "reconnecting…"; badge.classList.add("off");
  setTimeout(async () => { await loadCalls(); listen(Math.min(delay * 2, 10000)); }, delay);
}
async function loadCalls() {
  state.calls = (await api("/calls?limit=200")).calls;
  renderTail();
}

// -- sessions ---------------------------------------------------------------------------------------
async function sessions() {
  const { sessions } = await api("/sessions?limit=100");
  document.querySelector("#session-list tbody").replaceChildren(...sessions.map((s) => el("tr",
    { data: { session: s.id }, on: { click: () => timeline(s.id) } },
    el("td", { title: s.id }, short(s.id)), el("td", {}, time(s.last)), el("td", { class: "num" }, s.calls),
    el("td", {}, Object.entries(s.tiers).map(([t, n]) => [tierChip(t), ` ${n} `])),
    el("td", { class: "num" }, s.escalated), el("td", { class: "num" }, s.sticky),
    el("td", { class: "num" }, Object.values(s.mistakes).reduce((a, b) => a + b, 0)),
    el("td", { class: "num" }, s.reported),
    el("td", { class: "num" }, usd(s.cost_usd)), el("td", { class: "num" }, usd(s.baseline_cost_usd)),
    el("td", { class: "num", data: { usd: s.saved_usd } }, usd(s.saved_usd)))));
  if (state.session) timeline(state.session);
}
async function timeline(id) {
  state.session = id;
  const { session: s, calls: kept } = await api(`/sessions/${encodeURIComponent(id)}`);
  const calls = [...kept].reverse(); // oldest first
  let saved = 0, previous = null;
  const rows = calls.map((c) => {
    if (c.cost_usd != null && c.baseline_cost_usd != null) saved += c.baseline_cost_usd - c.cost_usd;
    const switched = previous !== null && previous !== c.tier;
    previous = c.tier;
    const sticky = c.route === "sticky";
    return el("tr", { class: [switched ? "switch" : "", sticky ? "sticky" : ""].join(" ").trim(), data: { id: c.id } },
      el("td", {}, time(c.ts)), el("td", {}, tierChip(c.tier), sticky ? el("span", { class: "chip sticky" }, "sticky") : null),
      el("td", {}, c.mistakes.map((m) => el("span", { class: "chip mistake" }, m))),
      el("td", { class: "num" }, usd(c.cost_usd)), el("td", { class: "num" }, usd(saved)));
  });
  document.getElementById("timeline").replaceChildren(
    el("h3", {}, `Session ${short(id)}`),
    el("dl", {}, el("dt", {}, "calls"), el("dd", {}, s.calls), el("dt", {}, "cost"), el("dd", {}, usd(s.cost_usd)),
      el("dt", {}, "baseline"), el("dd", {}, usd(s.baseline_cost_usd)),
      el("dt", {}, "saved so far"), el("dd", { data: { usd: s.saved_usd }, id: "session-saved" }, usd(s.saved_usd)),
      el("dt", {}, "sticky calls"), el("dd", {}, s.sticky),
      el("dt", {}, "reached the agent"), el("dd", {}, `${s.reported} call(s) it reported failed`)),
    el("table", { class: "timeline" }, el("thead", {}, el("tr", {}, ["time", "tier", "mistakes", "cost", "saved so far"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.reverse())));
}

// -- start --------------------------------------------------------------------------------------------
const refresh = throttled(() => {
  overview().catch(() => {});
  if (document.getElementById("sessions").classList.contains("on")) sessions().catch(() => {});
}, 2000);
function tabs() {
  document.querySelectorAll("nav button").forEach((b) => b.addEventListener("click", () => {
    document.querySelectorAll("nav button, .tab").forEach((n) => n.classList.remove("on"));
    b.classList.add("on");
    document.getElementById(b.dataset.tab).classList.add("on");
    if (b.dataset.tab === "sessions") sessions().catch(() => {});
  }));
  const form = document.getElementById("filters");
  form.addEventListener("input", () => { state.paused = form.elements.paused.checked; renderTail(); });
  form.addEventListener("submit", (e) => e.preventDefault());
}
async function start() {
  try {
    await overview();
    await loadCalls();
  } catch (e) { return; }
  if (!live) live = listen();
}
tabs();
start();
