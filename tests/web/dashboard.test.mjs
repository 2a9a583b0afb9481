// dashboard.test.mjs - the web dashboard in a real browser: Playwright
// (playwright-core from npm) drives Debian's /usr/bin/chromium headless
// against a real gpupool daemon started here on a loopback port with
// simulated GPUs.  Checks: the page loads with no console errors, shows the
// GPUs (marked sim) and a submitted task, updates without reload when the
// task ends, cancel works, the queue shows position and reason, the
// language switch works (and the browser's language is the default), and
// with keys configured the page asks for a key, and with a gateway model on
// a fake-openai upstream (tests/upstream/fake-openai.c) the gateway page
// shows the model, its upstreams (a failing one marked down), the tiers and
// the tenant, and a tenant's key sees only its own tenant and tasks while the
// admin key sees both. A task's detail lists its runs (where each ran, how it
// ended, why), in both languages.  Screenshots go to tests/web/screenshots/ (git-ignored): look
// at them.
//
// Run: cd tests/web && npm ci && GPUPOOL_BIN=$PWD/../../build/gpupool \
//   FAKE_OPENAI_BIN=$PWD/../../build/tests/fake-openai node --test dashboard.test.mjs
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const BIN = process.env.GPUPOOL_BIN || path.join(REPO, "build", "gpupool");
const FAKE = process.env.FAKE_OPENAI_BIN || path.join(REPO, "build", "tests", "fake-openai");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = path.join(HERE, "screenshots");
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

/* One gpupool server with its own data dir and config. */
async function startDaemon(configText, key) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gpupool-web-"));
  const config = path.join(dir, "gpupool.yaml");
  fs.writeFileSync(config, configText);
  const port = await freePort();
  const url = "http://127.0.0.1:" + port;
  const log = fs.openSync(path.join(dir, "server.log"), "a");
  const proc = spawn(BIN, ["server", "--config", config, "--listen", "127.0.0.1:" + port, "--data-dir", path.join(dir, "data")],
    { stdio: ["ignore", log, log] });
  const headers = key ? { Authorization: "Bearer " + key } : {};
  const d = {
    url, dir, proc, key,
    async api(method, p, body) {
      const r = await fetch(url + p, { method, headers: Object.assign({ "Content-Type": "application/json" }, headers),
        body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await r.text();
      let json = null;
      try { json = JSON.parse(text); } catch { /* not JSON */ }
      return { status: r.status, json, text };
    },
    async stop() {
      // end what is still active so no supervisor outlives the test
      try {
        const a = await d.api("GET", "/api/v1/tasks?state=active&limit=1000");
        for (const t of (a.json && a.json.tasks) || []) await d.api("POST", "/api/v1/tasks/" + t.id + "/cancel");
        for (let i = 0; i < 50; i++) {
          const b = await d.api("GET", "/api/v1/tasks?state=active&limit=1000");
          if (!b.json || b.json.tasks.length === 0) break;
          await sleep(200);
        }
      } catch { /* already gone */ }
      if (proc.exitCode === null) {
        proc.kill("SIGTERM");
        for (let i = 0; i < 100 && proc.exitCode === null; i++) await sleep(100);
        if (proc.exitCode === null) proc.kill("SIGKILL");
      }
      fs.closeSync(log);
      if (!process.env.KEEP_TMP) fs.rmSync(dir, { recursive: true, force: true });
    },
    log() { try { return fs.readFileSync(path.join(dir, "server.log"), "utf8").slice(-4000); } catch { return ""; } },
  };
  for (let i = 0; i < 200; i++) {
    if (proc.exitCode !== null) throw new Error("gpupool server exited: " + d.log());
    try {
      const r = await fetch(url + "/readyz", { headers });
      if (r.status === 200) return d;
    } catch { /* not yet */ }
    await sleep(50);
  }
  throw new Error("gpupool server not ready: " + d.log());
}

/* A fake-openai upstream serving model; returns {url, proc, stop()}. */
async function startUpstream(name, model) {
  const proc = spawn(FAKE, ["--listen", "127.0.0.1:0", "--name", name, "--model", model, "--die-with-parent"],
    { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise((resolve, reject) => {
    let out = "";
    proc.on("error", reject);
    proc.on("exit", (c) => reject(new Error("fake-openai exited " + c + " (FAKE_OPENAI_BIN=" + FAKE + ")")));
    proc.stdout.on("data", (c) => {
      out += c;
      const m = /^ready (\d+)/m.exec(out);
      if (m) resolve(Number(m[1]));
    });
  });
  const url = "http://127.0.0.1:" + port;
  return {
    url, proc,
    stop() { if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL"); },
  };
}

async function openBrowser(opts) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "gpupool-chromium-"));
  const ctx = await chromium.launchPersistentContext(profile, Object.assign({
    executablePath: CHROMIUM, headless: true, args: FLAGS, viewport: { width: 1400, height: 900 },
  }, opts || {}));
  const page = ctx.pages()[0] || await ctx.newPage();
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  const close = async () => { await ctx.close(); fs.rmSync(profile, { recursive: true, force: true }); };
  return { ctx, page, errors, profile, close };
}

async function shot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, name + ".png"), fullPage: true });
}

async function waitFor(fn, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await sleep(100);
  }
}

let d, b;

/* "HH:MM" in UTC, min minutes from now. */
function hhmm(min) {
  const t = new Date(Date.now() + min * 60e3);
  return String(t.getUTCHours()).padStart(2, "0") + ":" + String(t.getUTCMinutes()).padStart(2, "0");
}

before(async () => {
  assert.ok(fs.existsSync(BIN), "gpupool binary not built: " + BIN);
  assert.ok(fs.existsSync(CHROMIUM), "chromium not installed: " + CHROMIUM);
  d = await startDaemon("gpus: {backend: sim}\nmonitor: {sample_ms: 500}\ntasks: {kill_grace_s: 2}\n" +
    "billing: {prices: [{gpu_model: \"*\", per_gpu_hour: 3600}]}\n");
  b = await openBrowser({ locale: "en-US" });
});

after(async () => {
  if (b) await b.close();
  if (d) await d.stop();
});

test("the page loads with no console errors and shows every GPU, marked sim", async () => {
  const r = await fetch(d.url + "/");
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /^text\/html/);
  assert.ok(r.headers.get("etag"));
  assert.match(r.headers.get("content-security-policy"), /default-src 'self'/);
  const again = await fetch(d.url + "/", { headers: { "If-None-Match": r.headers.get("etag") } });
  assert.equal(again.status, 304);
  const js = await fetch(d.url + "/static/app.js");
  assert.match(js.headers.get("content-type"), /^text\/javascript/);

  await b.page.goto(d.url + "/");
  await b.page.waitForSelector("[data-gpu]");
  assert.equal(await b.page.locator("[data-gpu]").count(), 4);
  assert.ok(await b.page.locator("#sim-badge").isVisible(), "the sim badge is shown");
  assert.equal(await b.page.locator("[data-gpu] .tag.sim").count(), 4);
  assert.equal(await b.page.locator("#nav a.active").textContent(), "Overview");
  await sleep(1500);
  await shot(b.page, "01-overview-idle");
  assert.deepEqual(b.errors, []);
});

test("a submitted task shows on its GPU and in the task list, and the page updates when it ends", async () => {
  const sub = await d.api("POST", "/api/v1/tasks", { name: "demo-train", tenant_id: "lab", gpu_request: 2,
    command: ["sh", "-c", "echo epoch 1 loss 0.93; echo epoch 2 loss 0.71; sleep 4; echo done"] });
  assert.equal(sub.status, 201, sub.text);
  const id = sub.json.id;
  assert.equal(sub.json.state, "running");
  const t0 = Date.now();
  await b.page.goto(d.url + "/#/overview");
  await b.page.waitForSelector(`.tasks-on a[data-task="${id}"]`, { timeout: 2500 });
  assert.equal(await b.page.locator(`.tasks-on a[data-task="${id}"]`).count(), 2, "on both of its GPUs");
  await sleep(1200); // the cards' utilisation follows within a GPU poll
  await shot(b.page, "02-overview-task-running");

  await b.page.click('#nav a[data-page="tasks"]');
  const row = b.page.locator(`#tasks-table tr[data-task="${id}"]`);
  await row.waitFor({ timeout: 2500 });
  assert.equal(await row.locator(".state").textContent(), "running");
  await row.click();
  await b.page.waitForSelector("#task-detail:not([hidden])");
  await waitFor(async () => (await b.page.locator("#td-log").textContent()).includes("epoch 2"), 3000, "the log tail");
  await shot(b.page, "03-task-detail-running");

  // the task ends (the API says so first); the page follows within 2 s without reload
  const ended = await waitFor(async () => {
    const r = await d.api("GET", "/api/v1/tasks/" + id);
    return r.json.state !== "running" ? Date.now() : 0;
  }, 15000, "the task to end");
  await waitFor(async () => (await row.locator(".state").textContent()) === "succeeded", 2000, "the row to say succeeded");
  const lag = Date.now() - ended;
  assert.ok(lag <= 2000, "the page updated " + lag + " ms after the task ended");
  console.log(`# task ${id} ran ${(ended - t0) / 1000}s; page updated ${lag} ms after it ended`);
  await waitFor(async () => (await b.page.locator("#td-log").textContent()).includes("done"), 7000, "the final log line");
  assert.ok(await b.page.locator("#td-cancel").isHidden(), "no cancel button on an ended task");
  await shot(b.page, "04-task-succeeded");
  assert.deepEqual(b.errors, []);
});

test("a page of another site cannot submit or cancel a task: fetch without preflight and a form post are refused", async () => {
  // the attack: any web page open in the workstation's browser posts to the loopback daemon
  const evil = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/html" });
    res.end("<!doctype html><title>another site</title><body></body>");
  });
  await new Promise((r) => evil.listen(0, "127.0.0.1", r));
  const page = await b.ctx.newPage();
  try {
    const victim = await d.api("POST", "/api/v1/tasks", { name: "victim", tenant_id: "lab", lease_ttl_s: 600 });
    assert.equal(victim.status, 201, victim.text);
    await page.goto("http://127.0.0.1:" + evil.address().port + "/");
    const sent = await page.evaluate(async ([api, id]) => {
      const body = JSON.stringify({ name: "pwned", command: ["sh", "-c", "true"] });
      const out = [];
      for (const ct of ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]) {
        try { await fetch(api + "/api/v1/tasks", { method: "POST", mode: "no-cors", headers: { "Content-Type": ct }, body }); out.push("sent"); }
        catch (e) { out.push(String(e)); }
      }
      try { await fetch(api + "/api/v1/tasks/" + id + "/cancel", { method: "POST", mode: "no-cors" }); out.push("sent"); }
      catch (e) { out.push(String(e)); }
      return out;
    }, [d.url, victim.json.id]);
    assert.deepEqual(sent, ["sent", "sent", "sent", "sent"]); // the browser did send them
    // a form with a text/plain body that reads as JSON: the browser navigates to the answer
    await page.setContent(`<form method="POST" enctype="text/plain" action="${d.url}/api/v1/tasks">` +
      `<input name='{"name":"pwned-form","x":"' value='"}'></form>`);
    await Promise.all([page.waitForNavigation(), page.evaluate(() => document.forms[0].submit())]);
    const answer = await page.locator("body").textContent();
    assert.match(answer, /cross_site_request/);
    const all = await d.api("GET", "/api/v1/tasks?limit=1000");
    assert.deepEqual(all.json.tasks.filter((t) => t.name.startsWith("pwned")), []);
    assert.equal(all.json.tasks.find((t) => t.id === victim.json.id).state, "running");
    await d.api("POST", "/api/v1/tasks/" + victim.json.id + "/cancel");
  } finally {
    await page.close();
    evil.close();
  }
});

test("cancel in the task detail cancels a running task", async () => {
  const sub = await d.api("POST", "/api/v1/tasks", { name: "long-job", tenant_id: "research", command: ["sleep", "600"] });
  assert.equal(sub.status, 201, sub.text);
  const id = sub.json.id;
  await b.page.goto(d.url + "/#/tasks/" + id);
  await b.page.waitForSelector("#td-cancel:not([hidden])");
  assert.equal(await b.page.locator("#td-title").textContent(), `#${id} · long-job`);
  await b.page.click("#td-cancel");
  const row = b.page.locator(`#tasks-table tr[data-task="${id}"]`);
  await waitFor(async () => (await row.locator(".state").textContent()) === "cancelled", 8000, "the row to say cancelled");
  const r = await d.api("GET", "/api/v1/tasks/" + id);
  assert.equal(r.json.state, "cancelled");
  await shot(b.page, "05-task-cancelled");
  assert.deepEqual(b.errors, []);
});

test("the queue page lists waiting tasks with their position and reason; tenants show usage", async () => {
  const held = [];
  for (let i = 0; i < 4; i++) {
    const r = await d.api("POST", "/api/v1/tasks", { name: "hold-" + i, tenant_id: i < 3 ? "lab" : "research", lease_ttl_s: 600 });
    assert.equal(r.status, 201, r.text);
    held.push(r.json.id);
  }
  const q1 = await d.api("POST", "/api/v1/tasks", { name: "big-gang", tenant_id: "research", gpu_request: 2, priority: 2, lease_ttl_s: 600 });
  const q2 = await d.api("POST", "/api/v1/tasks", { name: "small", tenant_id: "lab", priority: 7, lease_ttl_s: 600 });
  assert.equal(q1.json.state, "queued");
  await b.page.goto(d.url + "/#/queue");
  const r1 = b.page.locator(`#queue-table tr[data-task="${q1.json.id}"]`);
  await r1.waitFor({ timeout: 2500 });
  assert.equal(await r1.locator("td").first().textContent(), "1");
  assert.match(await r1.locator("td.reason").textContent(), /GPU/);
  assert.equal(await b.page.locator(`#queue-table tr[data-task="${q2.json.id}"] td`).first().textContent(), "2");
  assert.equal(await b.page.locator('.tier[data-tier="2"] .n').textContent(), "1");
  await shot(b.page, "06-queue");
  // the reason in the reader's language: the server sends its code and arguments
  const en = await r1.locator("td.reason").textContent();
  await b.page.click("#lang");
  await waitFor(async () => /等待同一节点上 2 块整块 GPU/.test(await r1.locator("td.reason").textContent()), 3000,
                "the reason in Chinese");
  assert.match(await r1.locator("td.reason").textContent(), /GPU 已预留/);
  // another tenant's task id is hidden in it, in Chinese too
  const r2 = b.page.locator(`#queue-table tr[data-task="${q2.json.id}"] td.reason`);
  await waitFor(async () => /另一租户的一个任务/.test(await r2.textContent()), 3000, "the hidden id's reason in Chinese");
  await shot(b.page, "06-queue-chinese");
  await b.page.click("#lang");
  await waitFor(async () => (await r1.locator("td.reason").textContent()) === en, 3000, "the reason in English again");

  await b.page.click('#nav a[data-page="tenants"]');
  const lab = b.page.locator('#tenants-table tr[data-tenant="lab"]');
  await lab.waitFor({ timeout: 2500 });
  assert.equal(await lab.locator("td").nth(1).textContent(), "3");  // GPUs held
  assert.equal(await lab.locator("td").nth(3).textContent(), "1");  // queued
  // no tenant is configured: the note says quotas come with configured tenants; no quota or balance column
  assert.ok(await b.page.locator("#quota-note").isVisible(), "the note, with no tenant configured");
  assert.ok(await b.page.locator("#tenants-table th.quota-col").isHidden());
  assert.ok(await b.page.locator("#tenants-table th.balance-col").isHidden());
  await sleep(5500); // let the per-tenant history gather points
  await b.page.reload();
  await lab.waitFor({ timeout: 2500 });
  await sleep(1200);
  await shot(b.page, "07-tenants");
  for (const id of held.concat([q1.json.id, q2.json.id])) await d.api("POST", "/api/v1/tasks/" + id + "/cancel");
  // their runs are recorded: the tenants page shows this month's usage and cost (1.00 per GPU-second)
  const u = await d.api("GET", "/api/v1/usage?group_by=tenant");
  const labUsage = u.json.groups.find((g) => g.key === "lab");
  assert.ok(labUsage && labUsage.gpu_ms > 3 * 5000, JSON.stringify(u.json));
  assert.equal(labUsage.cost_cents, Math.round(labUsage.gpu_ms / 10));
  await b.page.reload();
  await lab.waitFor({ timeout: 2500 });
  await waitFor(async () => (await lab.locator("td.month-cost").textContent()) === labUsage.cost, 5000, "lab's cost this month");
  assert.equal(await lab.locator("td.month-hours").textContent(), (labUsage.gpu_ms / 3600e3).toFixed(3));
  assert.deepEqual(b.errors, []);
});

test("the tasks page pages through every task, folds an array into one row, and shows exit code, duration and directory", async () => {
  const arr = await d.api("POST", "/api/v1/tasks", { name: "sweep", tenant_id: "lab", array: "0-4",
    command: ["sh", "-c", "sleep 1; exit 3"], workdir: "/tmp" });
  assert.equal(arr.status, 201, arr.text);
  const aid = arr.json.array_id;
  await waitFor(async () => (await d.api("GET", "/api/v1/arrays/" + aid)).json.counts.failed === 5, 20000, "the array to end");
  const leases = [];
  for (let i = 0; i < 30; i++) {
    const r = await d.api("POST", "/api/v1/tasks", { name: "pager-" + i, tenant_id: "pager", lease_ttl_s: 600 });
    assert.equal(r.status, 201, r.text);
    leases.push(r.json.id);
  }
  const all = (await d.api("GET", "/api/v1/tasks?limit=1000")).json.tasks;
  await b.page.goto(d.url + "/#/tasks");
  await b.page.selectOption("#f-size", "25");
  const rows = b.page.locator("#tasks-table tbody tr");
  await waitFor(async () => (await rows.count()) === 25 && (await rows.first().getAttribute("data-task")) === String(leases[29]),
    3000, "a first page of 25 tasks, newest first");
  assert.ok(await b.page.locator("#tasks-newer").isDisabled());
  assert.ok(await b.page.locator("#tasks-older").isEnabled());
  assert.match(await b.page.locator("#tasks-page").textContent(), /^Page 1 · #\d+ … #\d+$/);
  await shot(b.page, "05a-tasks-page-1");
  // page through to the end: every task is met once (the array's elements once it is expanded)
  const seen = new Set();
  let pages = 0, arrayPage = 0;
  for (;;) {
    pages++;
    await waitFor(async () => (await b.page.locator("#tasks-page").textContent()).startsWith("Page " + pages + " "), 3000, "page " + pages);
    const arow = b.page.locator(`#tasks-table tr[data-array="${aid}"]`);
    if (!arrayPage && (await arow.count()) === 1) {
      arrayPage = pages;
      // folded: one row for the 5 elements, their exit code, its directory
      assert.equal(await b.page.locator('#tasks-table tr.elem').count(), 0);
      assert.match(await arow.textContent(), /5 tasks, 5 on this page/);
      assert.match(await arow.locator(".array-states").textContent(), /failed 5/);
      assert.equal(await arow.locator("td.exit").textContent(), "3");
      assert.equal(await arow.locator("td.workdir").textContent(), "/tmp");
      assert.ok(await b.page.locator("#tasks-table th.workdir-col").isVisible(), "the directory column, as a task has one");
      await arow.click();
      await waitFor(async () => (await b.page.locator("#tasks-table tr.elem").count()) === 5, 2000, "the array expanded");
      const e0 = b.page.locator(`#tasks-table tr.elem[data-task="${aid}"]`);
      assert.equal(await e0.locator("td").first().textContent(), `#${aid} [0]`);
      assert.equal(await e0.locator("td.exit").textContent(), "3");
      assert.match(await e0.locator("td.duration").textContent(), /^\d+ s$/);
      assert.equal(await e0.locator("td.workdir").textContent(), "/tmp");
      await shot(b.page, "05b-tasks-array-expanded");
    }
    const ids = await b.page.locator("#tasks-table tr[data-task]").evaluateAll((rs) => rs.map((r) => Number(r.dataset.task)));
    for (const id of ids) { assert.ok(!seen.has(id), "task " + id + " on two pages"); seen.add(id); }
    // the user column shows only when a task on the page has a user
    const pageTasks = all.filter((x) => ids.includes(x.id));
    assert.equal(await b.page.locator("#tasks-table th.user-col").isVisible(), pageTasks.some((x) => x.user));
    if (await b.page.locator("#tasks-older").isDisabled()) break;
    await b.page.click("#tasks-older");
  }
  assert.ok(arrayPage > 1 && pages >= 2, "the array is on a later page");
  assert.deepEqual([...seen].sort((x, y) => x - y), all.map((x) => x.id).sort((x, y) => x - y));
  // and back
  await b.page.click("#tasks-newer");
  await waitFor(async () => (await b.page.locator("#tasks-page").textContent()).startsWith("Page " + (pages - 1) + " "), 3000, "the page before");
  // a running lease: no exit code, a duration
  await b.page.selectOption("#f-size", "100");
  const lr = b.page.locator(`#tasks-table tr[data-task="${leases[0]}"]`);
  await lr.waitFor({ timeout: 3000 });
  assert.equal(await lr.locator("td.exit").textContent(), "—");
  assert.match(await lr.locator("td.duration").textContent(), /^\d+ s$/);
  for (const id of leases) await d.api("POST", "/api/v1/tasks/" + id + "/cancel");
  await waitFor(async () => (await d.api("GET", "/api/v1/tasks?state=active&tenant=pager")).json.tasks.length === 0, 10000,
    "the leases to end");
  assert.deepEqual(b.errors, []);
});

test("configured tenants show their quota in force beside their use, and a balance only when they are billed", async () => {
  const dq = await startDaemon("gpus: {backend: sim}\nmonitor: {sample_ms: 500}\n" +
    "billing: {prices: [{gpu_model: \"*\", per_gpu_hour: 3600}]}\n" +
    "tenants:\n" +
    "  - {id: dept-a, kind: internal, quota: {max_gpus: 2, max_concurrent: 3, guaranteed_gpus: 1}}\n" +
    "  - {id: acme, kind: external}\n" +
    // a time rule in force now (UTC, from an hour ago to an hour ahead) raises dept-a's max_gpus
    `time_rules:\n  - {name: now, start: "${hhmm(-60)}", end: "${hhmm(60)}", quotas: {dept-a: {max_gpus: 3}}}\n`);
  const bq = await openBrowser({ locale: "en-US" });
  try {
    for (const [tenant, n] of [["dept-a", 1], ["acme", 1]]) {
      for (let i = 0; i < n; i++) {
        const r = await dq.api("POST", "/api/v1/tasks", { name: tenant + "-hold", tenant_id: tenant, lease_ttl_s: 600 });
        assert.equal(r.status, 201, r.text);
      }
    }
    await bq.page.goto(dq.url + "/#/tenants");
    const a = bq.page.locator('#tenants-table tr[data-tenant="dept-a"]');
    const x = bq.page.locator('#tenants-table tr[data-tenant="acme"]');
    await a.waitFor({ timeout: 3000 });
    await waitFor(async () => (await a.locator("td.quota").textContent()) === "GPUs 1 / 3 · running 1 / 3 · guaranteed 1 GPUstime rule",
      3000, "dept-a's quota in force beside its use");
    assert.match(await a.locator("td.quota .tag.rule").getAttribute("title"), /configured: max_gpus 2, max_concurrent 3/);
    assert.equal(await x.locator("td.quota").textContent(), "none");
    // dept-a is an internal department: not billed; acme has a balance (no credit, some use: at or below zero)
    assert.equal(await a.locator("td.balance").textContent(), "not billed");
    assert.match(await x.locator("td.balance").textContent(), /^-?\d+\.\d\d USD$/);
    assert.ok(await bq.page.locator("#tenants-table th.quota-col").isVisible());
    assert.ok(await bq.page.locator("#tenants-table th.balance-col").isVisible());
    assert.ok(await bq.page.locator("#quota-note").isHidden(), "no 'once tenants are configured' note: they are");
    await sleep(300);
    await shot(bq.page, "07b-tenants-quota");
    assert.deepEqual(bq.errors, []);
  } finally {
    await bq.close();
    await dq.stop();
  }
});

test("a queued task shows when it is expected to start and its run time learned from its earlier runs", async () => {
  const de = await startDaemon("gpus: {backend: sim}\nmonitor: {sample_ms: 500}\n");
  const be = await openBrowser({ locale: "en-US" });
  try {
    const sub = async (secs) => {
      const r = await de.api("POST", "/api/v1/tasks", { name: "train", gpu_request: 4, command: ["sleep", String(secs)] });
      assert.equal(r.status, 201, r.text);
      return r.json.id;
    };
    const done = async (ids) => {
      for (const id of ids) if ((await de.api("GET", "/api/v1/tasks/" + id)).json.state !== "succeeded") return false;
      return true;
    };
    const past = [await sub(1), await sub(1), await sub(1)]; // one after another: each takes all 4 GPUs
    await waitFor(() => done(past), 30000, "three runs of the job to succeed");
    const ids = [await sub(6), await sub(6), await sub(6)]; // the last two wait; another command: learned by name
    await be.page.goto(de.url + "/#/queue");
    const row = be.page.locator(`#queue-table tr[data-task="${ids[2]}"] td.expected`);
    await row.waitFor({ timeout: 3000 });
    await waitFor(async () => /^(in .+|any moment) · \d+% sure$/.test(await row.textContent()), 3000, "an expected start");
    assert.match(await row.getAttribute("title"), /\d\d:\d\d/);
    await shot(be.page, "06b-queue-expected-start");
    await be.page.goto(de.url + "/#/tasks/" + ids[2]);
    await be.page.waitForSelector("#task-detail:not([hidden])");
    await waitFor(async () => /learned from 3 runs of the same name/.test(await be.page.locator("#td-fields").textContent()),
      3000, "the predicted run time in the task detail");
    assert.match(await be.page.locator("#td-fields").textContent(), /expected start/);
    assert.deepEqual(be.errors, []);
  } finally {
    await be.close();
    await de.stop();
  }
});

test("what the server adds to a reason (a time rule in force) is said in Chinese too", async () => {
  const dr = await startDaemon("gpus: {backend: sim}\nmonitor: {sample_ms: 500}\n" +
    "tenants:\n  - {id: dept-a, kind: internal, quota: {max_gpus: 2}}\n" +
    `time_rules:\n  - {name: night, start: "${hhmm(-60)}", end: "${hhmm(60)}", quotas: {dept-a: {max_gpus: 1}}}\n`);
  const br = await openBrowser({ locale: "en-US" });
  try {
    const hold = await dr.api("POST", "/api/v1/tasks", { name: "hold", tenant_id: "dept-a", lease_ttl_s: 600 });
    assert.equal(hold.json.state, "running", hold.text);
    const q = await dr.api("POST", "/api/v1/tasks", { name: "waits", tenant_id: "dept-a", lease_ttl_s: 600 });
    assert.equal(q.json.state, "queued", q.text);
    await br.page.goto(dr.url + "/#/queue");
    const cell = br.page.locator(`#queue-table tr[data-task="${q.json.id}"] td.reason`);
    await cell.waitFor({ timeout: 3000 });
    assert.match(await cell.textContent(), /quota.* \(time rule night in force\)/);
    await br.page.click("#lang");
    await waitFor(async () => /^租户 dept-a 的配额：.*（时间规则 night 生效中）$/.test(await cell.textContent()), 3000,
      "the reason and its time-rule note in Chinese");
    assert.doesNotMatch(await cell.textContent(), /time rule|in force/);
    // the other notes the server writes, as it writes them, said in Chinese on this page
    const said = await br.page.evaluate(() => [
      I18N.reason("", { code: "gang_whole", args: ["2"], note: "; requeued (retry 1 of 3): node n1 lost contact with the " +
        "server; its run was fenced (2 nodes not synced since the server started: no work there until its agent reports)" }),
      I18N.reason("", { code: "no_whole_gpu", args: [], note: "; preempted (2 times): its GPUs went to a more urgent task " +
        "or back to their guarantee" }),
      I18N.reason("", { code: "no_whole_gpu", args: [], note: "; preempted (1 time): the lease was lost after the 30 s grace period" }),
      I18N.reason("", { code: "no_whole_gpu", args: [], note: "; requeued (retry 2 of 2): GPU n2:3 failed: Xid 79" }),
      I18N.reason("no node in the pool can hold it now (8 GPUs on one node); it waits for one to join: node n4 is lost " +
        "and may come back", null),
    ]);
    assert.deepEqual(said, [
      "等待同一节点上 2 块整块 GPU；已重新排队（第 1 次重试，共 3 次）：节点 n1 与服务器失去联系，其运行已被隔离停止" +
        "（2 个节点自服务器启动后尚未同步：其 agent 报告之前不会在上面分配任务）",
      "没有空闲的整块 GPU；已被抢占（2 次）：其 GPU 让给了更紧急的任务，或归还给保底配额",
      "没有空闲的整块 GPU；已被抢占（1 次）：宽限期 30 秒过后租用被收回",
      "没有空闲的整块 GPU；已重新排队（第 2 次重试，共 2 次）：GPU n2:3 故障: Xid 79",
      "目前池中没有节点放得下它（8 GPUs on one node）；它在等待节点加入：节点 n4 已失联，可能会回来",
    ]);
    assert.deepEqual(br.errors, []);
  } finally {
    await br.close();
    await dr.stop();
  }
});

test("a task's detail shows each of its runs: where, how it ended, in English and Chinese", async () => {
  const dp = await startDaemon("gpus: {backend: sim}\nmonitor: {sample_ms: 500}\n" +
    "scheduler: {preemption: {enabled: true, min_runtime_sec: 0, grace_sec: 0}}\n");
  const bp = await openBrowser({ locale: "en-US" });
  try {
    const low = await dp.api("POST", "/api/v1/tasks", { name: "preempted-one", tenant_id: "bulk", priority: 8,
      preemptible: true, exclusive: true, gpu_request: 4, command: ["sleep", "60"] });
    assert.equal(low.json.state, "running", low.text);
    const id = low.json.id;
    const urgent = await dp.api("POST", "/api/v1/tasks", { tenant_id: "prod", priority: 0, exclusive: true, gpu_request: 4,
      lease_ttl_s: 600 });
    assert.equal(urgent.json.state, "running", urgent.text);
    assert.equal((await dp.api("POST", "/api/v1/tasks/" + urgent.json.id + "/release", {})).status, 200);
    await waitFor(async () => (await dp.api("GET", "/api/v1/tasks/" + id)).json.state === "running", 5000, "run 2");
    await bp.page.goto(dp.url + "/#/tasks/" + id);
    await bp.page.waitForSelector("#task-detail:not([hidden])");
    const rows = bp.page.locator("#td-runs tbody tr");
    await waitFor(async () => (await rows.count()) === 3, 3000, "two runs in the detail, the first with why it ended");
    const r1 = bp.page.locator('#td-runs tr[data-run="1"]');
    assert.equal(await r1.locator(".state").textContent(), "preempted");
    assert.equal(await r1.locator("td").nth(4).textContent(), "local:0-3");
    assert.match(await r1.locator("td").nth(4).getAttribute("title"), /^local:0 SIM-0+/);
    assert.match(await bp.page.locator('#td-runs tr[data-why="1"]').textContent(), /^Why it ended: its GPUs went to a more urgent task/);
    assert.equal(await bp.page.locator('#td-runs tr[data-why="2"]').count(), 0);
    assert.equal(await bp.page.locator('#td-runs tr[data-run="2"] .state').textContent(), "running");
    await shot(bp.page, "09-task-runs");
    await bp.page.click("#lang");
    await waitFor(async () => (await r1.locator(".state").textContent()) === "被抢占", 3000, "the runs in Chinese");
    assert.match(await bp.page.locator('#td-runs tr[data-why="1"]').textContent(), /^结束原因：其 GPU 让给了更紧急的任务/);
    assert.equal(await bp.page.locator("#td-runs th").first().textContent(), "第几次");
    // a queued task that never ran says so
    const hold = await dp.api("POST", "/api/v1/tasks", { tenant_id: "prod", priority: 0, exclusive: true, gpu_request: 4,
      lease_ttl_s: 600 });
    const q = await dp.api("POST", "/api/v1/tasks", { name: "waits", gpu_request: 1, command: ["true"] });
    assert.equal(q.json.state, "queued", q.text);
    await bp.page.goto(dp.url + "/#/tasks/" + q.json.id);
    await waitFor(async () => bp.page.locator("#td-runs-empty").isVisible(), 3000, "no runs yet");
    assert.ok(await bp.page.locator("#td-runs").isHidden());
    assert.equal((await dp.api("POST", "/api/v1/tasks/" + hold.json.id + "/release", {})).status, 200);
    assert.deepEqual(bp.errors, []);
  } finally {
    await bp.close();
    await dp.stop();
  }
});

test("a GPU with gpus.sharing: mps and a task that is its MPS client say how they are isolated", async () => {
  // the stand-in nvidia-cuda-mps-control (tests/mps/), named by gpus.mps_control as NVIDIA's would be
  const standin = path.join(REPO, "tests", "mps", "nvidia-cuda-mps-control");
  const dm = await startDaemon("gpus: {backend: sim, sharing: mps, mps_control: \"" + standin + "\"}\n" +
    "monitor: {sample_ms: 500}\n");
  const bm = await openBrowser({ locale: "en-US" });
  const gpu0 = async () => (await dm.api("GET", "/api/v1/gpus")).json.gpus.find((g) => g.id === "local:0");
  try {
    await bm.page.goto(dm.url + "/");
    const tag = bm.page.locator('[data-gpu="local:0"] .tag.iso');
    await waitFor(async () => (await tag.count()) === 1, 5000, "the GPU's isolation tag");
    assert.equal(await tag.getAttribute("data-isolation"), "mps");
    assert.equal(await tag.textContent(), "MPS");
    const t = await dm.api("POST", "/api/v1/tasks", { name: "mps-client", memory_mb: 4000, compute_pct: 20,
      command: ["sleep", "60"] });
    assert.equal(t.status, 201, t.text);
    await waitFor(async () => (await gpu0()).mps.daemon === "running", 10000, "the GPU's MPS daemon");
    await bm.page.goto(dm.url + "/#/tasks/" + t.json.id);
    await bm.page.waitForSelector("#task-detail:not([hidden])");
    const iso = async () => {
      const dts = await bm.page.locator("#td-fields dt").allTextContents();
      const dds = await bm.page.locator("#td-fields dd").allTextContents();
      const i = dts.findIndex((x) => x === "isolation" || x === "隔离方式");
      return i < 0 ? null : dds[i];
    };
    await waitFor(async () => (await iso()) === "MPS · 20% of its compute", 5000, "the task's isolation");
    await shot(bm.page, "17-mps-task");
    await bm.page.click("#lang");
    await waitFor(async () => (await iso()) === "MPS · 20% 算力", 5000, "the task's isolation in Chinese");
    await dm.api("POST", "/api/v1/tasks/" + t.json.id + "/cancel");
    await waitFor(async () => (await gpu0()).mps.daemon === "stopped", 15000, "the MPS daemon to quit after its client");
    assert.deepEqual(bm.errors, []);
  } finally {
    await bm.close();
    try { // a daemon a failed test left
      const pid = Number(fs.readFileSync(path.join(dm.dir, "data", "mps", "0", "pipe", "nvidia-cuda-mps-control.pid"), "utf8"));
      if (pid > 0) process.kill(pid, "SIGKILL");
    } catch { /* none left */ }
    await dm.stop();
  }
});

test("without billing no tenant shows a balance", async () => {
  const dn = await startDaemon("gpus: {backend: sim}\ntenants:\n  - {id: acme, kind: external, quota: {max_concurrent: 5}}\n");
  const bn = await openBrowser({ locale: "en-US" });
  try {
    await bn.page.goto(dn.url + "/#/tenants");
    const x = bn.page.locator('#tenants-table tr[data-tenant="acme"]');
    await x.waitFor({ timeout: 3000 });
    await waitFor(async () => (await x.locator("td.quota").textContent()) === "running 0 / 5", 3000, "acme's quota");
    assert.ok(await bn.page.locator("#tenants-table th.balance-col").isHidden());
    assert.equal(await x.locator("td.balance").count(), 0);
    assert.deepEqual(bn.errors, []);
  } finally {
    await bn.close();
    await dn.stop();
  }
});

test("the nodes page lists node local with its state, GPUs busy/total and a fresh heartbeat", async () => {
  // needs the server side of issue 15 (GET /api/v1/nodes with gpus_total/gpus_busy/last_heartbeat_ms)
  const sub = await d.api("POST", "/api/v1/tasks", { name: "node-hold", tenant_id: "lab", lease_ttl_s: 600 });
  assert.equal(sub.status, 201, sub.text);
  await b.page.goto(d.url + "/#/nodes");
  const row = b.page.locator('#nodes-table tr[data-node="local"]');
  await row.waitFor({ timeout: 2500 });
  assert.equal(await b.page.locator("#nav a.active").textContent(), "Nodes");
  assert.equal(await row.locator(".node-state").textContent(), "ready");
  assert.match(await row.locator(".node-state").getAttribute("class"), /\bready\b/);
  await waitFor(async () => (await row.locator("td.gpus").textContent()) === "1 / 4", 2500, "1 of 4 GPUs busy");
  assert.match(await row.locator("td.heartbeat").textContent(), /ago$/);
  assert.equal(await row.locator("td.labels").textContent(), "—"); // gpupool/node is not shown
  assert.ok(await b.page.locator("#nodes-empty").isHidden());
  // refreshed like the rest: the lease ends, the row follows without a reload
  await d.api("POST", "/api/v1/tasks/" + sub.json.id + "/cancel");
  await waitFor(async () => (await row.locator("td.gpus").textContent()) === "0 / 4", 2500, "0 of 4 GPUs busy");
  await shot(b.page, "08a-nodes");
  assert.deepEqual(b.errors, []);
});

test("agents' GPUs: their readings on the overview grouped by node, the nodes table with CPUs, memory, disk and version, a node's page", async () => {
  const token = "gpj_" + "7c".repeat(32);
  const hash = "sha256:" + crypto.createHash("sha256").update(token).digest("hex");
  const dn = await startDaemon("gpus: {backend: none, poll_ms: 200}\nmonitor: {sample_ms: 500}\n" +
    "cluster: {join_tokens: [\"" + hash + "\"]}\n");
  const agents = [];
  const bn = await openBrowser({ locale: "en-US" });
  try {
    await waitFor(async () => (await dn.api("GET", "/readyz")).status === 200, 10000, "the server");
    for (const name of ["web-a", "web-b"]) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gpupool-web-agent-"));
      const cfg = path.join(dir, "agent.yaml");
      fs.writeFileSync(cfg, "gpus: {backend: sim, sim: [{name: \"Sim H100\", memory_mb: 81920, count: 2}]}\n" +
        "agent: {heartbeat_s: 1}\nnode: {name: " + name + "}\n");
      const log = fs.openSync(path.join(dir, "agent.log"), "a");
      agents.push(spawn(BIN, ["agent", "--server", dn.url, "--token", token, "--config", cfg, "--name", name,
        "--listen", "127.0.0.1:" + await freePort(), "--data-dir", path.join(dir, "data")], { stdio: ["ignore", log, log] }));
    }
    await waitFor(async () => {
      const r = await dn.api("GET", "/api/v1/gpus");
      return r.json && r.json.gpus.length === 4 && r.json.gpus.every((g) => g.temp_c !== null);
    }, 15000, "both agents' readings");
    const sub = await dn.api("POST", "/api/v1/tasks", { name: "on-b", command: ["sleep", "60"],
      node_selector: { "gpupool/node": "web-b" } });
    assert.equal(sub.status, 201, sub.text);
    await bn.page.goto(dn.url + "/#/overview");
    const heads = bn.page.locator("#gpu-cards h3.node-head");
    await waitFor(async () => (await heads.count()) === 2, 5000, "a heading per node");
    assert.deepEqual(await heads.allTextContents(), ["web-a: 2 GPUs", "web-b: 2 GPUs"]);
    // the card of the busy GPU shows the agent's (simulated) readings: 35 % per task, 30 + 35/2 C
    const busy = sub.json.gpus && sub.json.gpus.length ? sub.json.gpus[0].index : 0;
    const card = bn.page.locator('#gpu-cards .card[data-gpu="web-b:' + busy + '"]');
    await waitFor(async () => /35%/.test(await card.locator(".meter").first().textContent()), 10000, "35 % on web-b");
    assert.match(await card.locator(".facts").textContent(), /47 °C/);
    assert.match(await bn.page.locator('#gpu-cards .card[data-gpu="web-a:0"] .meter').first().textContent(), /0%/);
    await shot(bn.page, "08b-agents-overview");
    // the nodes table: the machine of each node (this one: both agents run here)
    await bn.page.goto(dn.url + "/#/nodes");
    const row = bn.page.locator('#nodes-table tr[data-node="web-a"]');
    await row.waitFor({ timeout: 5000 });
    assert.equal(await row.locator("td.cpus").textContent(), String(os.cpus().length));
    assert.match(await row.locator("td.mem").textContent(), /^\d+\.\d GB \/ \d+\.\d GB$/);
    assert.match(await row.locator("td.disk").textContent(), /^\d+\.\d GB$/);
    assert.match(await row.locator("td.version").textContent(), /^\d+\.\d+\.\d+/);
    // a node's page: its facts and its GPUs' cards
    await row.locator("a").click();
    await waitFor(async () => (await bn.page.locator("#nd-title").textContent()) === "Node web-a", 5000, "web-a's page");
    assert.equal(bn.page.url(), dn.url + "/#/nodes/web-a");
    assert.equal(await bn.page.locator("#nd-cards .card").count(), 2);
    assert.deepEqual(await bn.page.locator("#nd-cards .card .id").allTextContents(), ["web-a:0", "web-a:1"]);
    assert.match(await bn.page.locator("#nd-stats").textContent(), /ago/);
    await shot(bn.page, "08c-node-page");
    // 中文
    await bn.page.locator("#lang").click();
    await waitFor(async () => (await bn.page.locator("#nd-title").textContent()) === "节点 web-a", 3000, "the Chinese title");
    assert.equal(await bn.page.locator("#nodes-table th[data-i18n=col_cpus]").textContent(), "CPU 数");
    await bn.page.locator("#lang").click();
    assert.deepEqual(bn.errors, []);
  } finally {
    for (const a of agents) a.kill("SIGTERM");
    await bn.close();
    await dn.stop();
  }
});

test("the gateway page says it is not configured; the alerts page lists the rules", async () => {
  await b.page.goto(d.url + "/#/gateway");
  await b.page.waitForSelector("#gateway-off:not([hidden])");
  assert.equal(await b.page.locator("#gateway-off h2").textContent(), "Gateway not configured");
  assert.ok(await b.page.locator("#gateway-on").isHidden(), "no gateway tables without a gateway");
  await shot(b.page, "08-gateway");
  await b.page.click('#nav a[data-page="alerts"]');
  await waitFor(async () => (await b.page.locator("#rules-table tbody tr").count()) === 2, 2500, "the rules");
  await shot(b.page, "09-alerts");
  assert.deepEqual(b.errors, []);
});

test("with a gateway model the gateway page shows the model, its upstreams, the tiers and the tenant, in English and Chinese", async () => {
  assert.ok(fs.existsSync(FAKE), "fake-openai not built: " + FAKE);
  const MODEL = "tiny-chat";
  const ua = await startUpstream("up-a", MODEL), ub = await startUpstream("up-b", MODEL);
  let dg, bg;
  try {
    dg = await startDaemon("gpus: {backend: sim}\n" +
      "gateway:\n  max_queue: 500\n  upstream_down_sec: 600\n  models:\n" +
      `    - {name: ${MODEL}, context: 4096, upstreams: ["${ua.url}", "${ub.url}"]}\n`);
    bg = await openBrowser({ locale: "en-US" });
    const chat = () => dg.api("POST", "/v1/chat/completions",
      { model: MODEL, max_tokens: 8, messages: [{ role: "user", content: "hello there" }] });
    for (let i = 0; i < 3; i++) {
      const r = await chat();
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.object, "chat.completion");
    }
    await bg.page.goto(dg.url + "/#/gateway");
    await bg.page.waitForSelector("#gateway-on:not([hidden])");
    assert.ok(await bg.page.locator("#gateway-off").isHidden(), "no 'not configured' notice");
    // the model: 3 requests (loopback without keys is the tenant "default")
    const mrow = bg.page.locator(`#gw-models-table tr[data-model="${MODEL}"]`);
    await mrow.waitFor({ timeout: 2500 });
    assert.equal(await mrow.locator("td").first().textContent(), MODEL);
    await waitFor(async () => (await mrow.locator("td.requests").textContent()) === "3", 2500, "the model's 3 requests");
    assert.equal(await mrow.locator("td").nth(5).textContent(), "24"); // completion tokens: 3 × max_tokens 8
    // timings: p50 / p95 of latency, time to first token, tokens/s (the model's and the tenant's)
    for (const row of [mrow, bg.page.locator('#gw-tenants-table tr[data-tenant="default"]')]) {
      assert.match(await row.locator("td.latency").textContent(), /^\d+(\.\d+)? m?s \/ \d+(\.\d+)? m?s$/);
      assert.match(await row.locator("td.ttft").textContent(), /^\d+(\.\d+)? m?s \/ \d+(\.\d+)? m?s$/);
      assert.match(await row.locator("td.tps").textContent(), /^\d+(\.\d)? \/ \d+(\.\d)?$/);
    }
    const gs = (await dg.api("GET", "/api/v1/monitor/metrics")).json.gateway.models[0];
    assert.equal(gs.timed_requests, 3);
    assert.equal(await mrow.locator("td.latency").getAttribute("title"), "3 answered requests measured");
    assert.ok(await bg.page.locator("#gw-models-empty").isHidden());
    // both upstreams healthy; the first (least in flight, first listed) took the requests
    const upA = bg.page.locator(`#gw-upstreams-table tr[data-upstream="${ua.url}"]`);
    const upB = bg.page.locator(`#gw-upstreams-table tr[data-upstream="${ub.url}"]`);
    assert.equal(await upA.locator("td.health").textContent(), "healthy");
    assert.equal(await upB.locator("td.health").textContent(), "healthy");
    assert.equal(await upA.locator("td.requests").textContent(), "3");
    assert.equal(await bg.page.locator("#gw-upstreams-table tr.down").count(), 0);
    // the tenant, the tiers, the summary
    const ten = bg.page.locator('#gw-tenants-table tr[data-tenant="default"]');
    assert.equal(await ten.locator("td.requests").textContent(), "3");
    assert.equal(await bg.page.locator("#gw-queue-table tbody tr").count(), 10);
    assert.equal(await bg.page.locator('#gw-queue-table tr[data-tier="5"] td').first().textContent(), "P5 · normal");
    assert.equal(await bg.page.locator("#gw-stats .stat").first().locator(".v").textContent(), "3");
    assert.equal(await bg.page.locator("#gw-stats .stat").nth(1).locator(".v").textContent(), "0 / 500");

    // the first upstream goes away: the request is retried on the second, the first is marked down
    // (a 5xx answer is retried too, but does not mark the upstream down)
    ua.stop();
    await waitFor(async () => ua.proc.exitCode !== null || ua.proc.signalCode !== null, 2000, "up-a to exit");
    const r = await chat();
    assert.equal(r.status, 200, r.text);
    await waitFor(async () => (await upA.getAttribute("class")) === "down", 2500, "the failed upstream marked down");
    assert.equal(await upA.locator("td.health").textContent(), "down");
    assert.equal(await upA.locator("td").nth(5).textContent(), "1"); // failures
    assert.equal(await upB.locator("td.health").textContent(), "healthy");
    await waitFor(async () => (await mrow.locator("td.requests").textContent()) === "4", 2500, "the model's 4th request");
    assert.equal(await bg.page.locator("#gw-stats .stat.bad").count() > 0, true, "a down upstream shows in the summary");
    await sleep(300);
    await shot(bg.page, "13-gateway");

    // in Chinese
    await bg.page.click("#lang");
    await waitFor(async () => (await bg.page.locator('#page-gateway h2[data-i18n="gw_upstreams"]').textContent()) === "上游", 2000, "the Chinese heading");
    assert.equal(await bg.page.locator('#page-gateway h2[data-i18n="gw_models"]').textContent(), "模型");
    await waitFor(async () => (await upA.locator("td.health").textContent()) === "不可用", 2000, "the Chinese health");
    await sleep(300);
    await shot(bg.page, "14-gateway-chinese");
    assert.deepEqual(bg.errors, []);
  } finally {
    if (bg) await bg.close();
    if (dg) await dg.stop();
    ua.stop();
    ub.stop();
  }
});

test("the language switch turns the page into Chinese and back", async () => {
  await b.page.goto(d.url + "/#/overview");
  await b.page.waitForSelector("[data-gpu]");
  assert.equal(await b.page.locator('#nav a[data-page="overview"]').textContent(), "Overview");
  await b.page.click("#lang");
  await waitFor(async () => (await b.page.locator('#nav a[data-page="overview"]').textContent()) === "概览", 2000, "Chinese nav");
  assert.equal(await b.page.locator("#sim-badge").textContent(), "模拟 GPU");
  assert.equal(await b.page.getAttribute("html", "lang"), "zh-CN");
  await waitFor(async () => (await b.page.locator("#stats .k").first().textContent()) === "忙碌 GPU", 2000, "Chinese stats");
  await sleep(800);
  await shot(b.page, "10-overview-chinese");
  // the choice is kept across a reload
  await b.page.reload();
  await b.page.waitForSelector("[data-gpu]");
  assert.equal(await b.page.locator('#nav a[data-page="tasks"]').textContent(), "任务");
  await b.page.click("#lang");
  await waitFor(async () => (await b.page.locator('#nav a[data-page="tasks"]').textContent()) === "Tasks", 2000, "English nav");
  assert.deepEqual(b.errors, []);
});

test("with keys configured the page asks for a key, refuses a wrong one, and shows the pool with a good one (browser language Chinese)", async () => {
  const key = crypto.randomBytes(16).toString("hex");
  const hash = crypto.createHash("sha256").update(key).digest("hex");
  const dk = await startDaemon(`gpus: {backend: sim}\nauth: {admin_keys: ["sha256:${hash}"]}\n`, key);
  const bk = await openBrowser({ locale: "zh-CN" });
  try {
    // data needs the key; the page itself does not
    assert.equal((await fetch(dk.url + "/api/v1/gpus")).status, 401);
    assert.equal((await fetch(dk.url + "/metrics")).status, 401);
    assert.equal((await fetch(dk.url + "/")).status, 200);
    await bk.page.goto(dk.url + "/");
    await bk.page.waitForSelector("#key-dialog[open]");
    assert.equal(await bk.page.locator("#key-dialog h3").textContent(), "API 密钥"); // browser language by default
    assert.equal(await bk.page.locator("[data-gpu]").count(), 0);
    await shot(bk.page, "11-key-prompt");
    await bk.page.fill("#key-input", "not-the-key");
    await bk.page.click("#key-save");
    await bk.page.waitForSelector("#key-error:not([hidden])", { timeout: 3000 });
    await bk.page.fill("#key-input", key);
    await bk.page.click("#key-save");
    await bk.page.waitForSelector("[data-gpu]", { timeout: 3000 });
    assert.equal(await bk.page.locator("[data-gpu]").count(), 4);
    await sleep(800);
    await shot(bk.page, "12-with-key");
    // the only console errors are the browser's notes about the refused requests (401)
    assert.deepEqual(bk.errors.filter((e) => !/401/.test(e)), []);
  } finally {
    await bk.close();
    await dk.stop();
  }
});

test("a tenant key on the page sees its own tenant only; the admin key sees both", async () => {
  const hex = (k) => crypto.createHash("sha256").update(k).digest("hex");
  const admin = crypto.randomBytes(16).toString("hex"), ka = crypto.randomBytes(16).toString("hex");
  const kb = crypto.randomBytes(16).toString("hex");
  const dk = await startDaemon(`gpus: {backend: sim}\nmonitor: {sample_ms: 500}\nauth: {admin_keys: ["sha256:${hex(admin)}"]}\n` +
    `tenants:\n  - {id: team-a, keys: ["sha256:${hex(ka)}"]}\n  - {id: team-b, keys: ["sha256:${hex(kb)}"]}\n`, admin);
  const bk = await openBrowser({ locale: "en-US" });
  try {
    for (const [k, name] of [[ka, "a-job"], [kb, "b-secret-job"]]) {
      const r = await fetch(dk.url + "/api/v1/tasks", { method: "POST", body: JSON.stringify({ name, lease_ttl_s: 600 }),
        headers: { Authorization: "Bearer " + k, "Content-Type": "application/json" } });
      assert.equal(r.status, 201, await r.text());
    }
    const login = async (key) => {
      await bk.page.goto(dk.url + "/#/tenants");
      await bk.page.evaluate(() => localStorage.clear());
      await bk.page.reload();
      await bk.page.waitForSelector("#key-dialog[open]");
      await bk.page.fill("#key-input", key);
      await bk.page.click("#key-save");
      await bk.page.locator('#tenants-table tr[data-tenant]').first().waitFor({ timeout: 4000 });
      await sleep(800);
      return bk.page.locator("#tenants-table tr[data-tenant]").evaluateAll((rows) => rows.map((r) => r.dataset.tenant));
    };
    assert.deepEqual((await login(ka)).sort(), ["team-a"]);
    await shot(bk.page, "14-tenant-key-tenants");
    await bk.page.goto(dk.url + "/#/tasks");
    await bk.page.waitForTimeout(1500);
    const text = await bk.page.locator("body").innerText();
    assert.ok(text.includes("a-job"), "its own task is listed");
    assert.ok(!text.includes("b-secret-job") && !text.includes("team-b"), "the other tenant is not shown");
    assert.deepEqual((await login(admin)).sort(), ["team-a", "team-b"]);
    assert.deepEqual(bk.errors.filter((e) => !/401/.test(e)), []);
  } finally {
    await bk.close();
    await dk.stop();
  }
});
