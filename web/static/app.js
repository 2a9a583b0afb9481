/* app.js - the gpupool dashboard.  Plain JavaScript, no build step.
 *
 * Pages are sections of index.html chosen by the URL hash (#/overview,
 * #/queue, #/tasks, #/nodes, #/tenants, #/gateway, #/alerts).  The current page
 * polls the HTTP API once a second (history charts every 5 s), so what it
 * shows is at most about a second old; nothing reloads.  Every request
 * carries the API key kept in localStorage (if any); a 401 opens the key
 * dialog, a 403 shows that the key may not see the page.  Text from the
 * server is only ever set with textContent. */
"use strict";
(function () {
  const POLL_MS = 1000, HISTORY_MS = 5000;
  const $ = (id) => document.getElementById(id);
  const t = (...a) => I18N.t(...a);
  const state = { page: "overview", backend: "", lastOk: 0, busy: false, historyAt: 0, selected: null,
                  tasks: [], detailFor: 0, logAt: 0, cancelling: {},
                  taskState: "", taskSize: 100, pages: [null], taskNext: null, expanded: {} };

  /* ---- HTTP ---- */

  function key() { return localStorage.getItem("gpupool.key") || ""; }

  class HttpError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  async function api(path, opts) {
    opts = opts || {};
    const headers = Object.assign({}, opts.headers || {});
    // the server takes a write's body only as JSON (415 otherwise)
    if (opts.body !== undefined && !headers["Content-Type"]) headers["Content-Type"] = "application/json";
    if (key()) headers.Authorization = "Bearer " + key();
    let r;
    try {
      r = await fetch(path, { method: opts.method || "GET", headers: headers, body: opts.body, cache: "no-store" });
    } catch (e) {
      throw new HttpError(0, "unreachable", String(e));
    }
    const backend = r.headers.get("X-Gpupool-Backend");
    if (backend) setBackend(backend);
    if (r.status === 401) { askKey(key() !== ""); throw new HttpError(401, "unauthorized", "unauthorized"); }
    if (opts.raw) { if (!r.ok) throw new HttpError(r.status, "error", String(r.status)); return r; }
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) {
      const err = body && body.error ? body.error : { code: "error", message: String(r.status) };
      throw new HttpError(r.status, err.code, err.message);
    }
    return body;
  }

  /* ---- small DOM helpers ---- */

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    if (attrs) for (const k of Object.keys(attrs)) {
      if (k === "class") e.className = attrs[k];
      else if (k === "text") e.textContent = attrs[k];
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
    for (const c of kids) if (c !== null && c !== undefined) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    return e;
  }
  function fill(tbody, rows) { tbody.textContent = ""; rows.forEach((r) => tbody.appendChild(r)); }
  function dur(s) {
    if (s === null || s === undefined || isNaN(s)) return t("none");
    if (s < 60) return t("seconds", Math.round(s));
    if (s < 3600) return t("minutes", Math.round(s / 60));
    return t("hours", (s / 3600).toFixed(1));
  }
  function when(iso) {
    if (!iso) return t("none");
    const d = new Date(iso);
    return d.toLocaleString(I18N.lang === "zh" ? "zh-CN" : "en-GB", { hour12: false });
  }
  /* when a queued task is expected to start, from the server's learned run
   * times (expected_start_at; none where it has no estimate) */
  function expected(x) {
    if (!x.expected_start_at) return t("none");
    const s = (Date.parse(x.expected_start_at) - Date.now()) / 1000;
    return (s <= 0 ? t("expected_now") : t("expected_in", dur(s))) +
      (x.expected_start_confidence !== undefined ? " · " + t("confidence", Math.round(x.expected_start_confidence * 100)) : "");
  }
  function gb(mb) { return mb === null || mb === undefined ? t("none") : (mb / 1024).toFixed(1) + " GB"; }
  function stateCell(s) { return el("span", { class: "state " + s, text: t("state_" + s) }); }

  function setBackend(b) {
    if (b === state.backend) return;
    state.backend = b;
    $("sim-badge").hidden = b !== "sim";
  }

  function banner(text) {
    const b = $("banner");
    b.hidden = !text;
    b.textContent = text || "";
  }

  function live(ok) {
    if (ok) state.lastOk = Date.now();
    const stale = Date.now() - state.lastOk > 3 * POLL_MS;
    const needKey = $("key-dialog").open;
    $("live").classList.toggle("stale", stale || needKey);
    $("live-text").textContent = needKey ? t("key_needed") : stale ? t("live_stale") : t("live_ok");
    $("live").title = state.lastOk ? t("live_title", new Date(state.lastOk).toLocaleTimeString()) : "";
  }

  /* ---- key dialog ---- */

  function askKey(bad) {
    const d = $("key-dialog");
    $("key-error").hidden = !bad;
    if (!d.open) { d.showModal(); $("key-input").value = ""; $("key-input").focus(); }
  }

  /* ---- overview ---- */

  function statBox(v, k, bad) { return el("div", { class: "stat" + (bad ? " bad" : "") }, el("div", { class: "v", text: v }), el("div", { class: "k", text: k })); }

  function meter(label, value, pct, cls) {
    const bar = el("div", { class: "bar " + (cls || "") }, el("span"));
    bar.firstChild.style.width = Math.max(0, Math.min(100, pct || 0)) + "%";
    return el("div", { class: "meter" }, el("div", { class: "row" }, el("span", { text: label }), el("b", { text: value })), bar);
  }

  function gpuCard(g, snap) {
    const cls = ["card"];
    if (!g.healthy) cls.push("unhealthy");
    if (g.drained) cls.push("drained");
    const tags = [];
    if (g.backend === "sim") tags.push(el("span", { class: "tag sim", text: t("gpu_sim") }));
    tags.push(g.healthy ? el("span", { class: "tag ok", text: t("gpu_healthy") }) : el("span", { class: "tag bad", text: t("gpu_unhealthy") }));
    if (g.drained) tags.push(el("span", { class: "tag warn", text: t("gpu_drained") }));
    if (g.reserved) tags.push(el("span", { class: "tag", text: t("gpu_reserved") }));
    /* how its memory is isolated (docs/isolation.md): "MIG 1g.10gb" for a MIG instance */
    if (g.isolation && g.isolation !== "none") tags.push(el("span", { class: "tag iso", "data-isolation": g.isolation, text: g.isolation === "mig" && g.profile ? "MIG " + g.profile : t("iso_" + g.isolation) }));
    const used = g.memory_used_mb, total = g.memory_total_mb;
    const tasks = el("div", { class: "tasks-on" });
    if (g.tasks && g.tasks.length) {
      g.tasks.forEach((id) => tasks.appendChild(el("a", { href: "#/tasks/" + id, text: "#" + id, "data-task": String(id) })));
    } else {
      tasks.appendChild(el("span", { class: "idle", text: t("gpu_idle") }));
    }
    const extra = snap && snap.gpusById[g.id];
    const facts = el("div", { class: "facts" },
      el("span", {}, t("gpu_temp") + " ", el("b", { text: g.temp_c === null ? t("none") : g.temp_c + " °C" })),
      el("span", {}, t("gpu_power") + " ", el("b", { text: g.power_w === null ? t("none") : Math.round(g.power_w) + " W" })),
      extra && extra.sm_clock_mhz !== null ? el("span", {}, t("gpu_clock") + " ", el("b", { text: extra.sm_clock_mhz + " MHz" })) : null);
    const card = el("div", { class: cls.join(" "), "data-gpu": g.id },
      el("div", { class: "card-head" }, el("span", { class: "id", text: g.id }), el("span", { class: "grow" }), ...tags),
      el("div", { class: "name", text: g.name, title: g.uuid }),
      meter(t("gpu_util"), g.util_pct === null ? t("none") : g.util_pct + "%", g.util_pct, g.util_pct > 90 ? "hot" : ""),
      meter(t("gpu_mem"), gb(used) + " / " + gb(total), total ? (100 * (used || 0)) / total : 0, "mem"),
      facts, tasks,
      !g.healthy && g.health_reason ? el("div", { class: "health", text: g.health_reason }) : null,
      g.mps && g.mps.daemon === "failed" ? el("div", { class: "health mps", text: t("mps_failed", g.mps.error) }) : null);
    return card;
  }

  async function loadOverview() {
    const [gpus, snap] = await Promise.all([api("/api/v1/gpus"), api("/api/v1/monitor/metrics")]);
    snap.gpusById = {};
    (snap.gpus || []).forEach((g) => { snap.gpusById[g.id] = g; });
    const s = $("stats");
    s.textContent = "";
    s.appendChild(statBox(snap.gpus_busy + " / " + snap.gpus_total, t("stat_gpus_busy")));
    s.appendChild(statBox(snap.gpu_util_pct === null ? t("none") : Math.round(snap.gpu_util_pct) + "%", t("stat_util")));
    s.appendChild(statBox(String(snap.tasks_running), t("stat_running")));
    s.appendChild(statBox(String(snap.tasks_queued), t("stat_queued")));
    s.appendChild(statBox(dur(snap.queue_wait_p95_5m_s), t("stat_wait")));
    s.appendChild(statBox(Math.round(snap.utilization_pct) + "%", t("stat_memory")));
    s.appendChild(statBox(snap.counters.succeeded + " / " + (snap.counters.failed + snap.counters.timeout + snap.counters.lost), t("stat_finished")));
    s.appendChild(statBox(String(snap.alerts_firing), t("stat_alerts"), snap.alerts_firing > 0));
    const cards = $("gpu-cards");
    cards.textContent = "";
    /* grouped by node (a heading each, linking to its page) when the pool has several */
    const nodes = [...new Set(gpus.gpus.map((g) => g.node))]
      .sort((a, b) => (a === "local" ? -1 : b === "local" ? 1 : a < b ? -1 : a > b ? 1 : 0)); /* local, then by name */
    nodes.forEach((n) => {
      const mine = gpus.gpus.filter((g) => g.node === n);
      if (nodes.length > 1)
        cards.appendChild(el("h3", { class: "node-head", "data-node": n },
          el("a", { href: "#/nodes/" + encodeURIComponent(n), text: t("node_gpus", n, mine.length) })));
      mine.forEach((g) => cards.appendChild(gpuCard(g, snap)));
    });
    if (Date.now() - state.historyAt > HISTORY_MS) {
      state.historyAt = Date.now();
      const [u, q, r] = await Promise.all([
        api("/api/v1/monitor/history?metric=gpu_util_pct&since=-600"),
        api("/api/v1/monitor/history?metric=queued&since=-600"),
        api("/api/v1/monitor/history?metric=running&since=-600")]);
      const now = Date.now();
      LineChart.draw($("chart-util"), u.series.map((s) => ({ name: s.labels.gpu, points: s.points })),
        { t0: now - 600e3, t1: now, max: 100, step_ms: 1000, legend: $("legend-util") });
      const qs = [];
      if (q.series[0]) qs.push({ name: t("queued"), points: q.series[0].points, color: "#d98a00" });
      if (r.series[0]) qs.push({ name: t("running"), points: r.series[0].points, color: "#2f6fdf" });
      LineChart.draw($("chart-queue"), qs, { t0: now - 600e3, t1: now, step_ms: 1000, integer: true, legend: $("legend-queue") });
    }
  }

  /* ---- queue ---- */

  async function loadQueue() {
    const [q, snap] = await Promise.all([api("/api/v1/queue?limit=500"), api("/api/v1/monitor/metrics")]);
    const names = t("tier_names").split(",");
    const tiers = $("tiers");
    tiers.textContent = "";
    snap.queued_by_priority.forEach((n, p) => {
      tiers.appendChild(el("div", { class: "tier" + (n ? " busy" : ""), "data-tier": String(p) },
        el("div", { class: "n", text: String(n) }), el("div", { class: "l", text: t("tier", p) + (names[p] ? " · " + names[p] : "") })));
    });
    fill($("queue-table").tBodies[0], q.tasks.map((x) => el("tr", { "data-task": String(x.id) },
      el("td", { text: String(x.queue_position) }),
      el("td", {}, el("a", { href: "#/tasks/" + x.id, text: "#" + x.id })),
      el("td", { text: x.name }), el("td", { text: x.tenant_id }), el("td", { text: "P" + x.priority }),
      el("td", { text: String(x.gpu_request) + (x.memory_mb ? " × " + gb(x.memory_mb) : "") }),
      el("td", { text: dur(x.wait_s) }),
      el("td", { class: "expected", title: x.expected_start_at ? when(x.expected_start_at) : "", text: expected(x) }),
      el("td", { class: "reason", text: I18N.reason(x.reason, x.reason_detail) }))));
    $("queue-empty").hidden = q.tasks.length > 0;
  }

  /* ---- tasks ---- */


  function taskDuration(x) {
    if (!x.started_at) return null;
    const end = x.finished_at ? Date.parse(x.finished_at) : Date.now();
    return Math.max(0, (end - Date.parse(x.started_at)) / 1000);
  }
  function gpusText(x) { return x.gpus.length ? x.gpus.map((g) => g.node + ":" + g.index).join(", ") : String(x.gpu_request); }

  /* One task's row; cols says which optional columns are shown. */
  function taskRow(x, cols, elem) {
    const exit = x.exit_code === null || x.exit_code === undefined ? null : x.exit_code;
    return el("tr", { "data-task": String(x.id), class: (state.selected === x.id ? "sel" : "") + (elem ? " elem" : ""),
      onclick: () => { location.hash = "#/tasks/" + x.id; } },
      el("td", { text: elem ? "#" + x.id + " [" + x.array_index + "]" : "#" + x.id }), el("td", { text: x.name }),
      el("td", { text: x.tenant_id }),
      cols.user ? el("td", { class: "user", text: x.user || t("none") }) : null,
      el("td", { text: t("kind_" + x.kind) }), el("td", {}, stateCell(x.state)), el("td", { text: "P" + x.priority }),
      el("td", { text: gpusText(x) }),
      el("td", { class: "num exit" + (exit ? " bad" : ""), text: exit === null ? t("none") : String(exit) }),
      el("td", { class: "num duration", text: dur(taskDuration(x)) }),
      cols.workdir ? el("td", { class: "mono workdir", text: x.workdir || t("none"), title: x.workdir || "" }) : null,
      el("td", { text: when(x.submitted_at) }));
  }

  /* An array's elements on this page as one row: its counts by state
   * (GET /api/v1/arrays/{id}: all its elements), expanded on a click. */
  function arrayRow(id, elems, info, cols) {
    const open = !!state.expanded[id];
    const first = elems[elems.length - 1];
    const counts = info && info.counts ? info.counts : elems.reduce((c, x) => { c[x.state] = (c[x.state] || 0) + 1; return c; }, {});
    const summary = el("span", { class: "array-states" });
    for (const k of ["running", "queued", "succeeded", "failed", "cancelled", "timeout", "lost"]) {
      if (counts[k]) { summary.appendChild(stateCell(k)); summary.appendChild(document.createTextNode(" " + counts[k] + "  ")); }
    }
    const exits = new Set(elems.map((x) => x.exit_code).filter((e) => e !== null && e !== undefined));
    const started = elems.map((x) => x.started_at).filter((v) => v).map(Date.parse);
    const ends = elems.map((x) => (x.started_at ? (x.finished_at ? Date.parse(x.finished_at) : Date.now()) : null)).filter((v) => v);
    const span = started.length ? (Math.max(...ends) - Math.min(...started)) / 1000 : null;
    const total = info ? info.count : elems.length;
    return el("tr", { "data-array": String(id), class: "array" + (open ? " open" : ""),
      onclick: () => { state.expanded[id] = !state.expanded[id]; tick(); } },
      el("td", {}, el("span", { class: "fold", text: open ? "▾ " : "▸ " }), "#" + id + "[]"),
      el("td", {}, el("span", { text: first.name + " " }), el("span", { class: "tag", text: (info && info.array) || "" }),
        el("span", { class: "array-count", text: " " + t("array_elems", total, elems.length) })),
      el("td", { text: first.tenant_id }),
      cols.user ? el("td", { class: "user", text: first.user || t("none") }) : null,
      el("td", { text: t("kind_array") }), el("td", {}, summary), el("td", { text: "P" + first.priority }),
      el("td", { text: String(first.gpu_request) }),
      el("td", { class: "num exit", text: exits.size === 0 ? t("none") : [...exits].sort((a, b) => a - b).join(", ") }),
      el("td", { class: "num duration", text: dur(span) }),
      cols.workdir ? el("td", { class: "mono workdir", text: first.workdir || t("none") }) : null,
      el("td", { text: when(first.submitted_at) }));
  }

  async function loadTasks() {
    const st = $("f-state").value;
    const size = Number($("f-size").value) || 100; /* tasks a page (the API allows 1..1000) */
    if (st !== state.taskState || size !== state.taskSize) { state.taskState = st; state.taskSize = size; state.pages = [null]; }
    const after = state.pages[state.pages.length - 1];
    const list = await api("/api/v1/tasks?limit=" + size + (st ? "&state=" + encodeURIComponent(st) : "") +
      (after ? "&after=" + after : ""));
    state.taskNext = list.next_after;
    const q = $("f-text").value.trim().toLowerCase();
    const rows = list.tasks.filter((x) => !q || String(x.id) === q.replace(/^#/, "") ||
      (x.name || "").toLowerCase().includes(q) || (x.tenant_id || "").toLowerCase().includes(q) ||
      (x.user || "").toLowerCase().includes(q) || (x.workdir || "").toLowerCase().includes(q) ||
      (x.array_id && String(x.array_id) === q.replace(/^#/, "").replace(/\[\]$/, "")));
    state.tasks = rows;
    /* optional columns: shown when a task on the page has the field */
    const cols = { user: rows.some((x) => x.user), workdir: rows.some((x) => x.workdir) };
    document.querySelectorAll("#tasks-table .user-col").forEach((c) => { c.hidden = !cols.user; });
    document.querySelectorAll("#tasks-table .workdir-col").forEach((c) => { c.hidden = !cols.workdir; });
    /* arrays folded: their elements on this page, in one row where the first met stands */
    const groups = {}, order = [];
    for (const x of rows) {
      if (x.array_id) {
        if (!groups[x.array_id]) { groups[x.array_id] = []; order.push({ array: x.array_id }); }
        groups[x.array_id].push(x);
      } else {
        order.push({ task: x });
      }
    }
    const info = {};
    await Promise.all(Object.keys(groups).filter((id) => groups[id].length > 1 || state.expanded[id]).map(async (id) => {
      try { info[id] = await api("/api/v1/arrays/" + id); } catch (e) { info[id] = null; }
    }));
    const trs = [];
    for (const o of order) {
      if (o.task) { trs.push(taskRow(o.task, cols, false)); continue; }
      const elems = groups[o.array];
      if (elems.length === 1 && !info[o.array]) { trs.push(taskRow(elems[0], cols, false)); continue; }
      trs.push(arrayRow(o.array, elems, info[o.array], cols));
      if (state.expanded[o.array]) for (const x of elems) trs.push(taskRow(x, cols, true));
    }
    fill($("tasks-table").tBodies[0], trs);
    $("tasks-empty").hidden = rows.length > 0;
    const page = state.pages.length;
    $("tasks-page").textContent = t("page_of", page, list.tasks.length ? "#" + list.tasks[0].id + " … #" + list.tasks[list.tasks.length - 1].id : t("none"));
    $("tasks-newer").disabled = page <= 1;
    $("tasks-older").disabled = !state.taskNext;
    if (state.selected) await loadDetail(state.selected);
  }

  function taskPage(older) {
    if (older && state.taskNext) state.pages.push(state.taskNext);
    else if (!older && state.pages.length > 1) state.pages.pop();
    else if (!older) return;
    tick();
  }

  async function loadDetail(id) {
    const x = await api("/api/v1/tasks/" + id);
    $("task-detail").hidden = false;
    $("td-title").textContent = "#" + x.id + (x.name ? " · " + x.name : "");
    const dl = $("td-fields");
    dl.textContent = "";
    const add = (k, v) => { if (v === null || v === undefined || v === "") return; dl.appendChild(el("dt", { text: t(k) })); dl.appendChild(typeof v === "string" ? el("dd", { text: v }) : el("dd", {}, v)); };
    add("f_state", stateCell(x.state));
    add("f_tenant", x.tenant_id);
    add("f_user", x.user);
    if (x.array_id) add("f_array", "#" + x.array_id + " [" + x.array_index + "]");
    add("f_priority", "P" + x.priority);
    add("f_gpus", x.gpus.length ? x.gpus.map((g) => g.node + ":" + g.index).join(", ") : String(x.gpu_request));
    add("f_memory", x.memory_mb ? gb(x.memory_mb) : t("whole_gpu"));
    if (x.isolation && x.isolation !== "none") /* how its memory is held (docs/isolation.md) */
      add("f_isolation", t("iso_" + x.isolation) + (x.compute_pct ? " · " + t("compute_pct", x.compute_pct) : ""));
    if (x.queue_position) add("f_position", String(x.queue_position));
    add("f_reason", I18N.reason(x.reason, x.reason_detail));
    if (x.expected_start_at) add("f_expected", expected(x) + " (" + when(x.expected_start_at) + ")");
    if (x.estimate) add("f_estimate", t("estimate_of", dur(x.estimate.run_s), t("from_" + x.estimate.from), x.estimate.runs,
      Math.round(x.estimate.confidence * 100)));
    if (x.command) add("f_command", x.command.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : JSON.stringify(a))).join(" "));
    add("f_workdir", x.workdir);
    if (x.exit_code !== null && x.exit_code !== undefined) add("f_exit", String(x.exit_code));
    add("f_started", x.started_at ? when(x.started_at) : "");
    add("f_finished", x.finished_at ? when(x.finished_at) : "");
    if (x.started_at) add("f_duration", dur(taskDuration(x)));
    await loadRuns(x.id);
    const active = x.state === "queued" || x.state === "running";
    const btn = $("td-cancel");
    btn.hidden = !active;
    btn.disabled = !!state.cancelling[x.id] || (x.reason || "").startsWith("cancelling");
    btn.textContent = btn.disabled ? t("cancelling") : t("cancel");
    btn.dataset.task = String(x.id);
    const log = $("td-log");
    if (x.kind === "lease") { log.textContent = t("log_lease"); return; }
    if (state.detailFor !== x.id || active || Date.now() - state.logAt > 5000) {
      state.detailFor = x.id;
      state.logAt = Date.now();
      log.textContent = await logTail(x.id, active);
      log.scrollTop = log.scrollHeight;
    }
  }

  /* GPUs as NODE:0-3,5 per node, in their order ("local:0-3", "gpu-a:0-7, gpu-b:0-7") */
  function gpuRanges(gpus) {
    const out = [];
    for (let i = 0; i < gpus.length;) {
      const node = gpus[i].node, parts = [];
      while (i < gpus.length && gpus[i].node === node) {
        let j = i;
        while (j + 1 < gpus.length && gpus[j + 1].node === node && gpus[j + 1].index === gpus[j].index + 1) j++;
        parts.push(j > i ? gpus[i].index + "-" + gpus[j].index : String(gpus[i].index));
        i = j + 1;
      }
      out.push(node + ":" + parts.join(","));
    }
    return out.join(", ");
  }

  /* Every run of the task, first run first: where (its GPUs), when, how it
   * ended, its exit code and peak GPU memory (GET /api/v1/tasks/{id}/runs). */
  async function loadRuns(id) {
    let r = null;
    try { r = await api("/api/v1/tasks/" + id + "/runs"); } catch (e) { r = null; }
    const items = (r && r.items) || [];
    const trs = [];
    for (const x of items) {
      trs.push(el("tr", { "data-run": String(x.run) },
        el("td", { class: "num", text: String(x.run) }),
        el("td", {}, stateCell(x.state), x.exit_code === null || x.exit_code === undefined ? ""
          : el("span", { class: "exit", text: " " + t("exit_is", x.exit_code) })),
        el("td", { text: when(x.started_at) }),
        el("td", { class: "num", text: dur(x.elapsed_ms / 1000) }),
        el("td", { class: "gpus", text: gpuRanges(x.gpus || []), title: (x.gpus || []).map((g) => g.node + ":" + g.index + " " + g.uuid).join("\n") }),
        el("td", { class: "num", text: gbOf(x.gpu_memory_peak_mb) })));
      /* why it ended, on a line of its own under the run */
      if (x.reason) trs.push(el("tr", { class: "why", "data-why": String(x.run) },
        el("td", {}), el("td", { colspan: "5", text: t("run_why", I18N.reason(x.reason, null)) })));
    }
    fill($("td-runs").tBodies[0], trs);
    $("td-runs-wrap").hidden = items.length === 0;
    $("td-runs-empty").hidden = items.length > 0;
  }

  /* The last 16 KB of a task's log, read as a stream (logs may be large). */
  async function logTail(id, active) {
    const r = await api("/api/v1/tasks/" + id + "/logs", { raw: true });
    const reader = r.body.getReader();
    const keep = 16384, limit = 8 << 20;
    let chunks = [], size = 0, total = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value); size += value.length; total += value.length;
      while (size - chunks[0].length >= keep) size -= chunks.shift().length;
      if (total > limit) { reader.cancel(); break; }
    }
    let all = new Uint8Array(size), off = 0;
    for (const c of chunks) { all.set(c, off); off += c.length; }
    if (all.length > keep) all = all.slice(all.length - keep);
    const text = new TextDecoder().decode(all);
    if (!text) return active ? t("log_none") : t("log_empty");
    return (total > keep ? t("log_big", keep / 1024) + "\n" : "") + text;
  }

  async function cancelTask() {
    const id = Number($("td-cancel").dataset.task);
    if (!id) return;
    state.cancelling[id] = true;
    $("td-cancel").disabled = true;
    $("td-cancel").textContent = t("cancelling");
    try {
      await api("/api/v1/tasks/" + id + "/cancel", { method: "POST" });
    } catch (e) {
      banner(e.message);
    } finally {
      delete state.cancelling[id];
    }
    await tick();
  }

  /* ---- nodes ---- */

  /* GET /api/v1/nodes: the server's own GPUs (node "local") and every node
   * that joined through gpupool agent (docs/api.md). */
  /* a size in MiB as "7.5 GB", or "—" */
  function gbOf(mb) { return mb === null || mb === undefined ? t("none") : gb(mb); }

  async function loadNodes() {
    const [r, g] = await Promise.all([api("/api/v1/nodes"), state.node ? api("/api/v1/gpus") : null]);
    const nodes = r.nodes || [];
    const now = Date.now();
    fill($("nodes-table").tBodies[0], nodes.map((n) => {
      const models = [...new Set((n.gpus || []).map((g) => g.name).filter((x) => x))].join(", ");
      const labels = Object.keys(n.labels || {}).filter((k) => k !== "gpupool/node").map((k) => k + "=" + n.labels[k]).join(", ");
      const hb = n.last_heartbeat_ms ? t("ago", dur(Math.max(0, (now - n.last_heartbeat_ms) / 1000))) : t("none");
      const total = n.gpus_total !== undefined ? n.gpus_total : n.gpus;
      const busy = n.gpus_busy !== undefined ? n.gpus_busy + " / " : "";
      return el("tr", { "data-node": n.name, class: n.state === "lost" ? "down" : "" },
        el("td", { class: "strong" }, el("a", { href: "#/nodes/" + encodeURIComponent(n.name), text: n.name })),
        el("td", {}, el("span", { class: "node-state " + n.state, text: t("node_" + n.state) === "node_" + n.state ? n.state : t("node_" + n.state) })),
        el("td", { class: "num gpus", text: busy + (total === undefined ? t("none") : String(total)) }),
        el("td", { text: models || t("none") }),
        el("td", { class: "num cpus", text: n.cpus === null || n.cpus === undefined ? t("none") : String(n.cpus) }),
        el("td", { class: "num mem", text: n.memory_available_mb === null || n.memory_available_mb === undefined ? t("none")
          : gbOf(n.memory_available_mb) + " / " + gbOf(n.memory_total_mb) }),
        el("td", { class: "num disk", text: gbOf(n.disk_free_mb) }),
        el("td", { class: "version", text: n.version || t("none") }),
        el("td", { class: "labels", text: labels || t("none") }),
        el("td", { class: "heartbeat", text: hb }), el("td", { class: "mono", text: n.address || t("none") }));
    }));
    $("nodes-empty").hidden = nodes.length > 0;
    /* #/nodes/NAME: that node's machine and its GPUs' cards */
    const n = state.node && nodes.find((x) => x.name === state.node);
    $("node-detail").hidden = !n;
    if (!n) return;
    $("nd-title").textContent = t("node_title", n.name);
    const s = $("nd-stats");
    s.textContent = "";
    s.appendChild(statBox(n.cpus === null || n.cpus === undefined ? t("none") : String(n.cpus), t("stat_cpus")));
    s.appendChild(statBox(gbOf(n.memory_available_mb) + " / " + gbOf(n.memory_total_mb), t("stat_mem_free")));
    s.appendChild(statBox(gbOf(n.disk_free_mb) + " / " + gbOf(n.disk_total_mb), t("stat_disk_free")));
    s.appendChild(statBox(n.version || t("none"), t("stat_version")));
    s.appendChild(statBox(n.telemetry_ms ? t("ago", dur(Math.max(0, (now - n.telemetry_ms) / 1000))) : t("none"), t("stat_readings")));
    const cards = $("nd-cards");
    cards.textContent = "";
    ((g && g.gpus) || []).filter((x) => x.node === n.name).forEach((x) => cards.appendChild(gpuCard(x, null)));
  }

  /* ---- tenants ---- */

  /* A GPU count as the API gives it (a memory share is a fraction). */
  function gpus(n) { return n === null || n === undefined ? t("none") : String(Math.round(n * 1000) / 1000); }

  /* The quota in force (a time rule may have changed it: then its
   * configured quota is in the title) beside the use it limits. */
  function quotaCell(c) {
    const q = c.quota || {}, u = c.usage || {};
    const parts = [];
    if (q.max_gpus) parts.push(t("q_gpus", gpus(u.gpus || 0), gpus(q.max_gpus)));
    if (q.max_concurrent) parts.push(t("q_running", u.running || 0, q.max_concurrent));
    if (q.max_queued) parts.push(t("q_queued", u.queued || 0, q.max_queued));
    if (q.guaranteed_gpus) parts.push(t("q_guaranteed", gpus(q.guaranteed_gpus)));
    const td = el("td", { class: "quota-col quota" + (parts.length ? "" : " muted"), text: parts.length ? parts.join(" · ") : t("no_quota") });
    const full = (q.max_gpus && u.gpus >= q.max_gpus) || (q.max_concurrent && u.running >= q.max_concurrent) ||
      (q.max_queued && u.queued >= q.max_queued);
    if (full) td.classList.add("warn");
    if (c.quota_configured) {
      const b = c.quota_configured;
      td.appendChild(el("span", { class: "tag rule", text: t("q_time_rule"),
        title: t("q_configured", gpus(b.max_gpus), b.max_concurrent, b.max_queued, gpus(b.guaranteed_gpus)) }));
    }
    return td;
  }

  async function loadTenants() {
    const snap = await api("/api/v1/monitor/metrics");
    const ts = (snap.tenants || []).slice().sort((a, b) => b.gpus - a.gpus || b.gpu_seconds - a.gpu_seconds || a.id.localeCompare(b.id));
    /* usage and cost this month (recorded usage, list prices), the configured
     * tenants with their quotas in force and balances (docs/billing.md) */
    const usage = {}, conf = {};
    try {
      const u = await api("/api/v1/usage?group_by=tenant");
      for (const g of u.groups || []) usage[g.key] = g;
    } catch (e) { /* an older server: no month figures */ }
    try {
      const tn = await api("/api/v1/tenants");
      for (const x of tn.tenants || []) conf[x.id] = x;
    } catch (e) { /* an older server */ }
    const configured = Object.keys(conf).length > 0;
    /* a balance only for tenants that are billed: not an internal department,
     * and only when billing is configured (older servers: no "billed") */
    const billed = (c) => !!(c && c.billing && (c.billing.billed !== undefined ? c.billing.billed : c.kind !== "internal"));
    const anyBilled = Object.values(conf).some(billed);
    document.querySelectorAll(".quota-col").forEach((c) => { c.hidden = !configured; });
    document.querySelectorAll(".balance-col").forEach((c) => { c.hidden = !anyBilled; });
    $("quota-note").hidden = configured;
    const ids = new Set(ts.map((x) => x.id));
    for (const k of Object.keys(usage).concat(Object.keys(conf))) if (!ids.has(k)) {
      ids.add(k);
      ts.push({ id: k, gpus: 0, running: 0, queued: 0, memory_mb: 0, gpu_seconds: 0 });
    }
    fill($("tenants-table").tBodies[0], ts.map((x) => {
      const u = usage[x.id], c = conf[x.id];
      const quota = configured ? (c ? quotaCell(c) : el("td", { class: "quota-col quota muted", text: t("q_unknown") })) : null;
      let bal = null;
      if (anyBilled) {
        if (billed(c)) bal = el("td", { class: "balance-col balance num" + (c.billing.balance_cents <= 0 ? " bad" : ""), text: c.billing.balance + " " + c.billing.currency });
        else bal = el("td", { class: "balance-col balance muted", text: c ? t("not_billed") : t("none"), title: c ? t("not_billed_title") : "" });
      }
      return el("tr", { "data-tenant": x.id }, el("td", {}, x.id, c && c.kind === "internal" ? el("span", { class: "tag", text: t("kind_internal") }) : null),
        el("td", { text: String(x.gpus) }),
        el("td", { text: String(x.running) }), el("td", { text: String(x.queued) }), el("td", { text: x.memory_mb ? gb(x.memory_mb) : t("none") }),
        el("td", { text: (x.gpu_seconds / 3600).toFixed(2) }),
        el("td", { class: "month-hours", text: u ? (u.gpu_ms / 3600e3).toFixed(3) : "0.000" }),
        el("td", { class: "month-cost", text: u ? u.cost : "0.00" }), quota, bal);
    }));
    $("tenants-empty").hidden = ts.length > 0;
    if (Date.now() - state.historyAt > HISTORY_MS) {
      state.historyAt = Date.now();
      const h = await api("/api/v1/monitor/history?metric=tenant_gpus&since=-600");
      const now = Date.now();
      LineChart.draw($("chart-tenants"), h.series.map((s) => ({ name: s.labels.tenant, points: s.points })),
        { t0: now - 600e3, t1: now, step_ms: 1000, integer: true, legend: $("legend-tenants") });
    }
  }

  /* ---- gateway ---- */

  /* Everything comes from the metrics snapshot's gateway object
   * (gp_gw_stats_json; docs/gateway.md "Watching it").  There is no
   * gateway history series, so no chart. */
  function num(n) { return n === null || n === undefined ? t("none") : Number(n).toLocaleString(I18N.lang === "zh" ? "zh-CN" : "en-GB"); }
  function numTd(n, cls) { return el("td", { class: "num" + (cls ? " " + cls : ""), text: num(n) }); }
  function lastUsed(ms) {
    if (!ms) return el("td", { class: "muted", text: t("gw_never") });
    const s = Math.max(0, (Date.now() - ms) / 1000);
    return el("td", { title: when(new Date(ms).toISOString()), text: s < 1 ? t("gw_just_now") : t("ago", dur(s)) });
  }

  /* Timings (gp_gw_stats_json: seconds, tokens/s; null before the first). */
  function secs(v) {
    if (v === null || v === undefined) return t("none");
    if (v < 0.01) return (v * 1000).toFixed(1) + " ms";
    return v < 1 ? Math.round(v * 1000) + " ms" : v.toFixed(v < 10 ? 2 : 1) + " s";
  }
  function rate(v) { return v === null || v === undefined ? t("none") : (v < 10 ? v.toFixed(1) : String(Math.round(v))); }
  function pair(o, k, f) { return o[k + "_p50"] === undefined ? t("none") : f(o[k + "_p50"]) + " / " + f(o[k + "_p95"]); }
  function timingTds(o) {
    const tip = t("gw_timed", num(o.timed_requests || 0));
    return [el("td", { class: "num latency", text: pair(o, "latency_s", secs), title: tip }),
      el("td", { class: "num ttft", text: pair(o, "ttft_s", secs), title: tip }),
      el("td", { class: "num tps", text: pair(o, "tokens_per_s", rate), title: tip })];
  }

  async function loadGateway() {
    const snap = await api("/api/v1/monitor/metrics");
    const g = snap.gateway;
    const on = !!(g && g.configured);
    $("gateway-off").hidden = on;
    $("gateway-on").hidden = !on;
    if (!on) return;
    const ups = g.upstreams || [], models = g.models || [], tenants = g.tenants || [], tiers = g.queue_stats || [];
    const down = ups.filter((u) => !u.healthy).length;

    const s = $("gw-stats");
    s.textContent = "";
    s.appendChild(statBox(num(g.total_admitted), t("gw_stat_admitted")));
    s.appendChild(statBox(num(g.total_queued_now) + " / " + num(g.max_queue), t("gw_stat_queued")));
    s.appendChild(statBox(num(g.in_flight), t("gw_stat_in_flight")));
    s.appendChild(statBox(num(g.rejected_total), t("gw_stat_rejected"), g.rejected_total > 0));
    s.appendChild(statBox(num(g.timeouts_total), t("gw_stat_timeouts"), g.timeouts_total > 0));
    s.appendChild(statBox(num(g.upstream_errors), t("gw_stat_upstream_errors"), g.upstream_errors > 0));
    s.appendChild(statBox(num(g.retries), t("gw_stat_retries")));
    s.appendChild(statBox(num(g.context_length_errors), t("gw_stat_context")));
    s.appendChild(statBox((ups.length - down) + " / " + ups.length, t("gw_stat_upstreams_up"), down > 0));

    fill($("gw-models-table").tBodies[0], models.map((m) => el("tr", { "data-model": m.model },
      el("td", { class: "strong", text: m.model }), numTd(m.in_flight), numTd(m.queued, m.queued ? "warn" : ""),
      numTd(m.requests, "requests"), numTd(m.prompt_tokens), numTd(m.completion_tokens), ...timingTds(m), lastUsed(m.last_used_ms),
      numTd(m.unloaded))));
    $("gw-models-empty").hidden = models.length > 0;

    const sorted = ups.slice().sort((a, b) => (a.healthy - b.healthy) || a.model.localeCompare(b.model) || a.url.localeCompare(b.url));
    fill($("gw-upstreams-table").tBodies[0], sorted.map((u) => el("tr", { "data-upstream": u.url, "data-model": u.model, class: u.healthy ? "" : "down" },
      el("td", { text: u.model }), el("td", { class: "mono", text: u.url }),
      el("td", { class: "health" }, u.healthy ? el("span", { class: "tag ok", text: t("gw_up") }) : el("span", { class: "tag bad", text: t("gw_down") })),
      numTd(u.in_flight), numTd(u.requests, "requests"), numTd(u.failures, u.failures ? "bad" : ""))));
    $("gw-upstreams-empty").hidden = ups.length > 0;

    const names = t("tier_names").split(",");
    fill($("gw-queue-table").tBodies[0], tiers.map((q) => el("tr", { "data-tier": String(q.priority), class: q.current_depth ? "busy" : "" },
      el("td", { text: t("tier", q.priority) + (names[q.priority] ? " · " + names[q.priority] : "") }),
      numTd(q.current_depth, "depth"), el("td", { class: "num", text: q.max_depth ? q.utilization_pct.toFixed(1) + "%" : t("none") }),
      numTd(q.available_slots))));
    $("gw-queue-note").textContent = t("gw_queue_note", num(g.max_queue), num(g.client_gone_while_queued));

    const ts = tenants.slice().sort((a, b) => b.requests - a.requests || a.tenant_id.localeCompare(b.tenant_id));
    fill($("gw-tenants-table").tBodies[0], ts.map((x) => el("tr", { "data-tenant": x.tenant_id },
      el("td", { text: x.tenant_id }), numTd(x.requests, "requests"), numTd(x.in_flight), numTd(x.queued, x.queued ? "warn" : ""),
      numTd(x.prompt_tokens), numTd(x.completion_tokens), ...timingTds(x), numTd(x.rejected, x.rejected ? "bad" : ""))));
    $("gw-tenants-empty").hidden = ts.length > 0;

    $("gw-note").textContent = t("gw_note", num(g.tokenize_calls), num(g.tokenize_fallbacks), num(g.models_unloaded));
  }

  /* ---- alerts ---- */

  function alertCount(n) {
    const c = $("alert-count");
    c.hidden = !n;
    c.textContent = String(n);
  }

  async function loadAlerts() {
    const a = await api("/api/v1/alerts");
    const firing = a.alerts.filter((x) => x.state === "firing").length;
    alertCount(firing);
    fill($("alerts-table").tBodies[0], a.alerts.map((x) => el("tr", { "data-alert": x.rule },
      el("td", { text: x.rule + " (" + x.when + ")" }), el("td", { text: x.subject || t("none") }),
      el("td", { text: t("alert_" + x.state) }), el("td", { class: "sev-" + x.severity, text: x.severity }),
      el("td", { text: x.value === null ? t("none") : String(x.value) }), el("td", { text: when(x.started_at || x.pending_since) }))));
    $("alerts-empty").hidden = a.alerts.length > 0;
    fill($("resolved-table").tBodies[0], a.resolved.map((x) => el("tr", {},
      el("td", { text: x.rule + " (" + x.when + ")" }), el("td", { text: x.subject || t("none") }),
      el("td", { text: x.value === null ? t("none") : String(x.value) }), el("td", { text: when(x.started_at) }), el("td", { text: when(x.resolved_at) }))));
    fill($("rules-table").tBodies[0], a.rules.map((x) => el("tr", {},
      el("td", { text: x.name }), el("td", { text: x.when }), el("td", { text: dur(x.for_s) }), el("td", { text: dur(x.clear_s) }),
      el("td", { class: "sev-" + x.severity, text: x.severity }), el("td", { text: x.active ? t("yes") : t("no") + " · " + t("inactive_note") }))));
    $("webhook-note").textContent = a.webhook.configured ? t("webhook_on", a.webhook.queued) : t("webhook_off");
  }

  async function pollAlertCount() {
    const a = await api("/api/v1/alerts");
    alertCount(a.alerts.filter((x) => x.state === "firing").length);
  }

  /* ---- the loop ---- */

  const loaders = { overview: loadOverview, queue: loadQueue, tasks: loadTasks, nodes: loadNodes, tenants: loadTenants, gateway: loadGateway, alerts: loadAlerts };

  async function tick() {
    if (state.busy || $("key-dialog").open) return;
    state.busy = true;
    try {
      await loaders[state.page]();
      if (state.page !== "alerts") await pollAlertCount();
      banner("");
      live(true);
    } catch (e) {
      live(false);
      if (e.status === 401) return;
      if (e.status === 403) banner(e.code === "forbidden" && /loopback/.test(e.message) ? t("loopback_only") : t("forbidden"));
      else if (e.status === 0) banner(t("unreachable"));
      else if (e.status !== 401) banner(e.message);
    } finally {
      state.busy = false;
    }
  }

  function route() {
    const parts = (location.hash || "#/overview").replace(/^#\/?/, "").split("/");
    const page = loaders[parts[0]] ? parts[0] : "overview";
    const sel = page === "tasks" && parts[1] ? Number(parts[1]) : null;
    state.node = page === "nodes" && parts[1] ? decodeURIComponent(parts[1]) : null;
    if (page !== state.page) state.historyAt = 0;
    state.page = page;
    state.selected = sel;
    if (!sel) $("task-detail").hidden = true;
    document.querySelectorAll("section.page").forEach((s) => { s.hidden = s.id !== "page-" + page; });
    document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === page));
    tick();
  }

  function applyLang() {
    I18N.apply();
    $("lang").textContent = I18N.lang === "zh" ? "English" : "中文";
    document.title = "gpupool · " + t("nav_" + state.page);
    state.historyAt = 0;
    live(state.lastOk > 0);
  }

  document.addEventListener("DOMContentLoaded", () => {
    applyLang();
    $("lang").addEventListener("click", () => { I18N.set(I18N.lang === "zh" ? "en" : "zh"); applyLang(); tick(); });
    $("key-btn").addEventListener("click", () => askKey(false));
    $("key-form").addEventListener("submit", (ev) => {
      const v = $("key-input").value.trim();
      if (!v) { ev.preventDefault(); return; }
      localStorage.setItem("gpupool.key", v);
      setTimeout(tick, 0);
    });
    $("key-clear").addEventListener("click", () => { localStorage.removeItem("gpupool.key"); $("key-dialog").close(); tick(); });
    $("td-close").addEventListener("click", () => { location.hash = "#/tasks"; });
    $("td-cancel").addEventListener("click", cancelTask);
    $("f-state").addEventListener("change", tick);
    $("f-size").addEventListener("change", tick);
    $("f-text").addEventListener("input", tick);
    $("tasks-newer").addEventListener("click", () => taskPage(false));
    $("tasks-older").addEventListener("click", () => taskPage(true));
    window.addEventListener("hashchange", () => { route(); applyLang(); });
    window.addEventListener("resize", () => { state.historyAt = 0; });
    route();
    setInterval(tick, POLL_MS);
  });
})();
