// gateway.test.mjs - gpupool's OpenAI-compatible gateway, black box, with the
// official openai npm client as the caller.
//
// Each test starts its own fake upstream(s) (tests/upstream/fake-openai.c,
// behaviour chosen per request by markers such as #delay=MS, #hold, #fail500,
// #close; every model request it accepts is logged with --log, in order) and
// a real gpupool server (sim GPUs, a temp data dir, keys configured as
// "sha256:<hex>") on loopback ports, then drives /v1 with the openai client:
//   plain chat / completions / embeddings / models, and keys refused;
//   streaming (events arrive as the upstream sends them; usage at the end);
//   429 on a full queue, retried by the client itself after retry-after(-ms);
//   context too long -> 400 context_length_exceeded, nothing sent upstream;
//   priority under saturation: 1,000 requests queued behind one running,
//     P0 all first, then tiers 1..3 in WFQ shares within 10% of the weights;
//   X-Priority lowers a key's tier, never raises it past max_priority;
//   per-tenant max_concurrent and rpm, without holding back other tenants;
//   a client hanging up while queued leaves the queue and never reaches the
//     upstream;
//   upstream failure (5xx passed on OpenAI-shaped, a cut answer), a stalled
//     upstream cut after idle_timeout_sec, failover to the model's other
//     upstream when one fails or dies.
// Measured figures (429 waits, WFQ shares, time to cut a stall) are printed
// to stderr.
//
// Binaries: GPUPOOL_BIN (default build/gpupool), FAKE_OPENAI_BIN (default
// build/tests/fake-openai).  Run: tests/gateway/run.sh, or
//   cd tests/gateway && npm ci && GPUPOOL_BIN=... FAKE_OPENAI_BIN=... \
//     node --test --test-concurrency=1 gateway.test.mjs
// KEEP_TMP=1 keeps each test's directory (configs, server.log, upstream logs).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const GPUPOOL = process.env.GPUPOOL_BIN || path.join(REPO, "build", "gpupool");
const FAKE = process.env.FAKE_OPENAI_BIN || path.join(REPO, "build", "tests", "fake-openai");
const MODEL = "deepseek-7b";
const ADMIN = "admin-key-gw-tests";

const note = (msg) => process.stderr.write(msg + "\n"); // measured figures, for the log
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const sha = (k) => "sha256:" + crypto.createHash("sha256").update(k).digest("hex");

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

/* Poll fn until truthy; fails after ms, or at once when the call `watch`
 * (a promise the wait depends on) fails. */
async function until(what, fn, ms = 10000, watch = null) {
  const end = Date.now() + ms;
  let last;
  let failed = null;
  if (watch) watch.catch((e) => { failed = e; });
  for (;;) {
    if (failed) throw new Error("while waiting for " + what + ", the request failed: " + failed.message);
    try { last = await fn(); if (last) return last; } catch (e) { last = e; }
    if (Date.now() > end) throw new Error("timed out waiting for " + what + (last ? ": " + String(last) : ""));
    await sleep(25);
  }
}

/* Everything a test started, stopped when it ends. */
class World {
  constructor(name) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "gpupool-gw-" + name + "-"));
    this.procs = [];
  }

  /* A fake-openai upstream; returns {url, name, log(), stats(), release(), kill()}. */
  async upstream(name, ...args) {
    const logFile = path.join(this.dir, "upstream-" + name + ".log");
    const proc = spawn(FAKE, ["--listen", "127.0.0.1:0", "--name", name, "--model", MODEL, "--log", logFile,
      "--die-with-parent", ...args],
      { stdio: ["ignore", "pipe", "inherit"] });
    this.procs.push(proc);
    const port = await new Promise((resolve, reject) => {
      let out = "";
      proc.on("error", reject);
      proc.on("exit", (c) => reject(new Error("fake-openai exited " + c + " (FAKE_OPENAI_BIN=" + FAKE + ")")));
      proc.stdout.on("data", (d) => {
        out += d;
        const m = /^ready (\d+)/m.exec(out);
        if (m) resolve(Number(m[1]));
      });
    });
    const url = "http://127.0.0.1:" + port;
    return {
      url, name, proc,
      log() {
        if (!fs.existsSync(logFile)) return [];
        return fs.readFileSync(logFile, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
      },
      async stats() { return (await fetch(url + "/fake/stats")).json(); },
      async release() { return (await fetch(url + "/fake/release", { method: "POST" })).json(); },
      async failAll(on) { await fetch(url + (on ? "/fake/fail-all" : "/fake/recover"), { method: "POST" }); },
      kill() { proc.kill("SIGKILL"); },
    };
  }

  /* A gpupool server with config text; returns {url, admin(path)}. */
  async gpupool(configText) {
    const config = path.join(this.dir, "gpupool.yaml");
    fs.writeFileSync(config, configText);
    const port = await freePort();
    const url = "http://127.0.0.1:" + port;
    const logPath = path.join(this.dir, "server.log");
    const log = fs.openSync(logPath, "a");
    const proc = spawn(GPUPOOL, ["server", "--config", config, "--listen", "127.0.0.1:" + port,
      "--data-dir", path.join(this.dir, "data")], { stdio: ["ignore", log, log] });
    this.procs.push(proc);
    const serverLog = () => fs.readFileSync(logPath, "utf8").slice(-4000);
    await until("gpupool /readyz", async () => {
      if (proc.exitCode !== null) throw new Error("gpupool exited " + proc.exitCode + ":\n" + serverLog());
      const r = await fetch(url + "/readyz", { headers: { Authorization: "Bearer " + ADMIN } });
      return r.status === 200;
    }, 20000).catch((e) => { throw new Error(e.message + "\n" + serverLog()); });
    return {
      url, proc, serverLog,
      async admin(p) {
        const r = await fetch(url + p, { headers: { Authorization: "Bearer " + ADMIN } });
        const text = await r.text();
        assert.equal(r.status, 200, "GET " + p + ": " + text);
        return JSON.parse(text);
      },
    };
  }

  async stop() {
    for (const p of this.procs) {
      if (p.exitCode === null && p.signalCode === null) {
        p.kill("SIGTERM");
        for (let i = 0; i < 100 && p.exitCode === null && p.signalCode === null; i++) await sleep(50);
        if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
      }
    }
    if (!process.env.KEEP_TMP) fs.rmSync(this.dir, { recursive: true, force: true });
    else console.log("kept " + this.dir);
  }
}

/* Run body(world) with a fresh World, stopped afterwards. */
function gwtest(name, opts, body) {
  if (typeof opts === "function") { body = opts; opts = {}; }
  test(name, { timeout: 120000, ...opts }, async () => {
    const w = new World(name.replace(/[^a-z0-9]+/gi, "-").slice(0, 40));
    try { await body(w); } finally { await w.stop(); }
  });
}

/* The YAML config: tenants [{id, key, def, max, gw: "{...}"}], gateway
 * limits, one model on `upstreams`. */
function config({ upstreams, tenants = [], limits = "{max_concurrent: 100, max_rps: 0, max_tokens_per_sec: 0}",
  maxQueue = 10000, queueTimeout = 30, context = 4096, extra = "" }) {
  let y = "gpus: {backend: sim}\n";
  // 1,000 requests at once from one client: over the per-address default (256)
  y += "server: {max_connections: 4096, max_connections_per_ip: 2048}\n";
  y += `auth: {admin_keys: ["${sha(ADMIN)}"]}\n`;
  y += "scheduler: {weights: [256, 128, 64, 32, 16, 8, 4, 2, 1, 1]}\n";
  y += "tenants:\n";
  for (const t of tenants) {
    y += `  - {id: ${t.id}, keys: ["${sha(t.key)}"], default_priority: ${t.def ?? 5}, max_priority: ${t.max ?? 0}` +
      (t.gw ? `, gateway: ${t.gw}` : "") + "}\n";
  }
  y += "gateway:\n";
  y += `  queue_timeout_sec: ${queueTimeout}\n  max_queue: ${maxQueue}\n  limits: ${limits}\n`;
  y += extra;
  y += "  models:\n";
  y += `    - {name: ${MODEL}, context: ${context}, upstreams: [${upstreams.map((u) => '"' + u.url + '"').join(", ")}]}\n`;
  return y;
}

/* An openai client for key; calls records every HTTP exchange it makes
 * (its own retries included) as {start, end, status, headers}. */
function client(gp, key, opts = {}) {
  const calls = [];
  const c = new OpenAI({
    baseURL: gp.url + "/v1", apiKey: key, maxRetries: 0, timeout: 60000, ...opts,
    fetch: async (url, init) => {
      const rec = { start: Date.now() };
      calls.push(rec);
      const r = await fetch(url, init);
      rec.end = Date.now();
      rec.status = r.status;
      rec.headers = r.headers;
      return r;
    },
  });
  c.calls = calls;
  return c;
}

/* A call awaited later: its rejection is reported where it is awaited, not
 * as an unhandled rejection while the test is still setting up. */
const bg = (p) => { p.catch(() => {}); return p; };
const say = (text, extra = {}) => ({ model: MODEL, messages: [{ role: "user", content: text }], ...extra });
const words = (n) => Array.from({ length: n }, (_, i) => "tok" + i).join(" ");

/* The gateway's part of /admin/scheduler/stats: the object holding its
 * queue counters (under "gateway", the name gateway.h gives it). */
async function gwStats(gp) {
  const s = await gp.admin("/admin/scheduler/stats");
  const g = s.gateway;
  assert.ok(g && typeof g === "object" && "total_queued_now" in g,
    "/admin/scheduler/stats has no gateway.total_queued_now: " + JSON.stringify(s).slice(0, 600));
  return g;
}

// ---------------------------------------------------------------- plain

gwtest("plain chat, completion, embeddings and models through the openai client", async (w) => {
  const up = await w.upstream("u1");
  const gp = await w.gpupool(config({ upstreams: [up], tenants: [{ id: "alice", key: "k-alice", def: 2, max: 1 }] }));
  const ai = client(gp, "k-alice");

  const chat = await ai.chat.completions.create(say("hello there #tokens=5"));
  assert.equal(chat.object, "chat.completion");
  assert.equal(chat.model, MODEL);
  assert.equal(chat.choices[0].message.role, "assistant");
  assert.equal(chat.choices[0].message.content, words(5));
  assert.deepEqual(chat.usage, { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 });

  const capped = await ai.chat.completions.create(say("x", { max_tokens: 3 }));
  assert.equal(capped.choices[0].finish_reason, "length");
  assert.equal(capped.usage.completion_tokens, 3);

  const cmpl = await ai.completions.create({ model: MODEL, prompt: "one two", max_tokens: 2 });
  assert.equal(cmpl.choices[0].text, "tok0 tok1");
  assert.equal(cmpl.usage.total_tokens, 4);

  // the client asks for base64 embeddings by default and decodes them
  const emb = await ai.embeddings.create({ model: MODEL, input: ["a b", "c"], dimensions: 8 });
  assert.equal(emb.data.length, 2);
  assert.equal(emb.data[0].embedding.length, 8);
  assert.equal(emb.usage.prompt_tokens, 3);

  const models = [];
  for await (const m of ai.models.list()) models.push(m.id);
  assert.deepEqual(models, [MODEL]);

  // the upstream saw each model request once, with the user's text
  assert.deepEqual(up.log().map((e) => e.path),
    ["/v1/chat/completions", "/v1/chat/completions", "/v1/completions", "/v1/embeddings"]);

  // no key, a wrong key, an unknown model: OpenAI-shaped refusals, nothing sent upstream
  await assert.rejects(client(gp, "wrong-key").chat.completions.create(say("nope")),
    (e) => e instanceof OpenAI.AuthenticationError && typeof e.error?.message === "string");
  await assert.rejects(ai.chat.completions.create({ ...say("nope"), model: "no-such-model" }),
    (e) => e.status === 404 && typeof e.error?.message === "string");
  assert.equal(up.log().length, 4);
});

// ---------------------------------------------------------------- streaming

gwtest("streaming passes events on as the upstream sends them, then usage", async (w) => {
  const up = await w.upstream("u1");
  const gp = await w.gpupool(config({ upstreams: [up], tenants: [{ id: "alice", key: "k-alice" }] }));
  const ai = client(gp, "k-alice");

  const t0 = Date.now();
  const stream = await ai.chat.completions.create(say("stream me #tokens=6 #slow=150",
    { stream: true, stream_options: { include_usage: true } }));
  const seen = [];
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const ch = chunk.choices[0];
    if (ch?.delta?.content) seen.push({ text: ch.delta.content, at: Date.now() - t0 });
    if (ch?.finish_reason) finish = ch.finish_reason;
  }
  const total = Date.now() - t0;
  assert.equal(seen.map((s) => s.text).join(""), words(6));
  assert.equal(finish, "stop");
  assert.deepEqual(usage, { prompt_tokens: 4, completion_tokens: 6, total_tokens: 10 }); // 4 words of prompt
  // 5 gaps of 150 ms upstream: unbuffered means the first token came long before the last
  assert.ok(total >= 700, "stream took " + total + " ms");
  assert.ok(seen[0].at < total - 500, "first token at " + seen[0].at + " ms of " + total + ": the stream was buffered");
  assert.ok(seen[3].at - seen[1].at >= 200, "tokens 1..3 arrived together: " + JSON.stringify(seen));

  // a plain completion stream too
  const s2 = await ai.completions.create({ model: MODEL, prompt: "p", max_tokens: 3, stream: true });
  let text = "";
  for await (const c of s2) text += c.choices[0]?.text ?? "";
  assert.equal(text, "tok0 tok1 tok2");
});

// ---------------------------------------------------------------- 429 + client retry

gwtest("429 on a full queue has retry-after, and the client's own retry waits it out", async (w) => {
  const up = await w.upstream("u1");
  const gp = await w.gpupool(config({ upstreams: [up], tenants: [{ id: "alice", key: "k-alice" }],
    limits: "{max_concurrent: 1, max_rps: 0, max_tokens_per_sec: 0}", maxQueue: 1 }));
  const plain = client(gp, "k-alice");
  const running = bg(plain.chat.completions.create(say("running #delay=1200")));
  await until("the first request at the upstream", () => up.log().length === 1, 10000, running);
  const queued = bg(plain.chat.completions.create(say("queued #delay=200")));
  await until("one request queued", async () => (await gwStats(gp)).total_queued_now === 1, 10000, queued);

  // without retries: the 429 itself
  const err = await plain.chat.completions.create(say("refused")).then(() => null, (e) => e);
  assert.ok(err instanceof OpenAI.RateLimitError, "expected 429, got " + err);
  assert.equal(typeof err.error?.message, "string");
  const ra = Number(err.headers.get("retry-after"));
  const raMs = Number(err.headers.get("retry-after-ms"));
  assert.ok(Number.isInteger(ra) && ra >= 1, "retry-after: " + err.headers.get("retry-after"));
  assert.ok(raMs >= 1 && ra * 1000 >= raMs, "retry-after-ms " + raMs + " vs retry-after " + ra);

  // with the client's retries: every retry starts no earlier than the hint it got
  const retrying = client(gp, "k-alice", { maxRetries: 8 });
  const ok = await retrying.chat.completions.create(say("retried #tokens=2"));
  assert.equal(ok.choices[0].message.content, "tok0 tok1");
  const calls = retrying.calls;
  assert.ok(calls.length >= 2 && calls[0].status === 429, "first answer " + calls[0].status + ", " + calls.length + " calls");
  assert.equal(calls.at(-1).status, 200);
  for (let i = 0; i + 1 < calls.length; i++) {
    assert.equal(calls[i].status, 429);
    const h = calls[i].headers;
    const wait = h.get("retry-after-ms") !== null ? Number(h.get("retry-after-ms")) : 1000 * Number(h.get("retry-after"));
    const waited = calls[i + 1].start - calls[i].end;
    assert.ok(waited >= wait - 5, `retry ${i + 1} after ${waited} ms, the 429 said ${wait} ms`);
    note(`429 answer ${i + 1}: retry-after ${h.get("retry-after")}, retry-after-ms ${h.get("retry-after-ms")}; the client waited ${waited} ms`);
  }
  await running;
  await queued;
});

// ---------------------------------------------------------------- context

gwtest("a prompt over the model's context is 400 context_length_exceeded, not sent upstream", async (w) => {
  const up = await w.upstream("u1");
  const gp = await w.gpupool(config({ upstreams: [up], tenants: [{ id: "alice", key: "k-alice" }], context: 256 }));
  const ai = client(gp, "k-alice");
  const long = Array.from({ length: 600 }, (_, i) => "word" + i).join(" ");
  for (const req of [say(long), say("short", { max_tokens: 100000 })]) {
    const e = await ai.chat.completions.create(req).then(() => null, (x) => x);
    assert.ok(e instanceof OpenAI.BadRequestError, "expected 400, got " + e);
    assert.equal(e.code, "context_length_exceeded");
    assert.equal(typeof e.error.message, "string");
  }
  const e2 = await ai.completions.create({ model: MODEL, prompt: long }).then(() => null, (x) => x);
  assert.equal(e2?.code, "context_length_exceeded");
  assert.equal(up.log().length, 0, "refused requests reached the upstream");
  // and one that fits still works
  assert.equal((await ai.chat.completions.create(say("fits", { max_tokens: 4 }))).usage.completion_tokens, 4);
});

// ---------------------------------------------------------------- priority + WFQ

gwtest("under saturation P0 goes first, then tiers 1..3 in WFQ shares within 10% of the weights",
  { timeout: 240000 }, async (w) => {
    const up = await w.upstream("u1");
    const gp = await w.gpupool(config({
      upstreams: [up], queueTimeout: 200,
      limits: "{max_concurrent: 1, max_rps: 0, max_tokens_per_sec: 0}",
      tenants: [{ id: "online", key: "k-online", def: 0, max: 0 },
        { id: "batch", key: "k-batch", def: 1, max: 1 }],
    }));
    const online = client(gp, "k-online");
    const batch = client(gp, "k-batch");
    // one request runs (held at the upstream) while 1,000 queue behind it
    const blocker = bg(online.chat.completions.create(say("blocker #hold #tokens=1")));
    await until("the blocker at the upstream", async () => (await up.stats()).held === 1, 10000, blocker);
    const N = { 0: 100, 1: 300, 2: 300, 3: 300 };
    const order = [];
    for (let i = 0; i < 300; i++) for (const tier of [3, 2, 1, 0]) if (i < N[tier]) order.push(tier);
    const pending = [];
    for (const tier of order) {
      const n = pending.length;
      const req = say(`job tier=${tier} n=${n} #tokens=1`);
      pending.push(bg(tier === 0
        ? online.chat.completions.create(req)
        // batch's own tier is 1; X-Priority asks for a less urgent one
        : batch.chat.completions.create(req, { headers: { "X-Priority": String(tier) } })));
      if (n % 50 === 49) await sleep(5);
    }
    await until("1,000 requests queued", async () => (await gwStats(gp)).total_queued_now === 1000, 60000,
      Promise.all(pending));
    assert.equal((await up.release()).released, 1);
    const results = await Promise.all(pending);
    await blocker;
    assert.equal(results.length, 1000);

    const served = up.log().filter((e) => e.text.startsWith("job ")).map((e) => Number(/tier=(\d)/.exec(e.text)[1]));
    assert.equal(served.length, 1000);
    const firstNonP0 = served.findIndex((t) => t !== 0);
    assert.equal(firstNonP0, 100, "P0 not all first: " + served.slice(0, 120).join(""));
    // WFQ: while tiers 1, 2 and 3 all wait, they are served 128:64:32
    const rest = served.slice(100);
    const count = { 1: 0, 2: 0, 3: 0 };
    let window = 0;
    for (const t of rest) {
      count[t]++;
      window++;
      if (count[t] === N[t]) break; // a tier ran dry: the shares end here
    }
    const weights = { 1: 128, 2: 64, 3: 32 };
    const wsum = 128 + 64 + 32;
    for (const t of [1, 2, 3]) {
      const share = count[t] / window;
      const want = weights[t] / wsum;
      assert.ok(Math.abs(share - want) <= 0.1 * want,
        `tier ${t}: ${count[t]} of ${window} (${share.toFixed(3)}), weights say ${want.toFixed(3)}; order ${rest.slice(0, 60).join("")}`);
    }
    assert.ok(window >= 400, "window of " + window);
    note(`WFQ over the first ${window} after P0: tier1 ${count[1]}, tier2 ${count[2]}, tier3 ${count[3]} (weights 128:64:32)`);
    // and the P0 tenant's requests were answered normally
    for (const r of results) assert.equal(r.choices[0].message.content, "tok0");
  });

gwtest("X-Priority can lower a key's tier but never raise it above max_priority", async (w) => {
  const up = await w.upstream("u1");
  const gp = await w.gpupool(config({
    upstreams: [up], limits: "{max_concurrent: 1, max_rps: 0, max_tokens_per_sec: 0}",
    tenants: [{ id: "online", key: "k-online", def: 0, max: 0 }, { id: "batch", key: "k-batch", def: 1, max: 1 }],
  }));
  const online = client(gp, "k-online");
  const batch = client(gp, "k-batch");
  const blocker = bg(online.chat.completions.create(say("blocker #hold")));
  await until("the blocker at the upstream", async () => (await up.stats()).held === 1, 10000, blocker);
  // batch asks for tier 0 first; online asks for tier 2 (less urgent: allowed), then sends one at its own tier 0
  const asks0 = bg(batch.chat.completions.create(say("batch asks P0"), { headers: { "X-Priority": "0" } })
    .then(() => "ok", (e) => e));
  await until("batch's request queued (or refused)", async () => (await gwStats(gp)).total_queued_now === 1 ||
    (await Promise.race([asks0, sleep(1).then(() => null)])) !== null);
  const lowered = bg(online.chat.completions.create(say("online asks P2"), { headers: { "X-Priority": "P2" } }));
  const urgent = bg(online.chat.completions.create(say("online at P0")));
  await until("all queued", async () => (await gwStats(gp)).total_queued_now >= 2);
  await up.release();
  await Promise.all([blocker, lowered, urgent]);
  const r = await asks0;
  const order = up.log().map((e) => e.text).slice(1);
  if (r instanceof Error) {
    assert.equal(r.status, 403, "refused with " + r); // the config may refuse instead of clamping
    assert.deepEqual(order, ["online at P0", "online asks P2"]);
  } else {
    // clamped to tier 1: after online's tier 0, before online's tier 2
    assert.deepEqual(order, ["online at P0", "batch asks P0", "online asks P2"]);
  }
});

// ---------------------------------------------------------------- tenant limits

gwtest("per-tenant max_concurrent and rpm hold one tenant back without slowing another", async (w) => {
  const up = await w.upstream("u1");
  const gp = await w.gpupool(config({
    upstreams: [up],
    tenants: [{ id: "small", key: "k-small", def: 1, max: 1, gw: "{max_concurrent: 2}" },
      { id: "rated", key: "k-rated", def: 1, max: 1, gw: "{rpm: 60}" },
      { id: "other", key: "k-other", def: 1, max: 1 }],
  }));
  const small = client(gp, "k-small");
  const other = client(gp, "k-other");
  const t0 = Date.now();
  const smallDone = [];
  const smallReqs = Array.from({ length: 6 }, (_, i) =>
    bg(small.chat.completions.create(say(`small ${i} #delay=400`)).then(() => smallDone.push(Date.now() - t0))));
  await until("two of small's requests at the upstream",
    () => up.log().filter((e) => e.text.startsWith("small")).length === 2, 10000, Promise.all(smallReqs));
  await sleep(150);
  assert.equal(up.log().filter((e) => e.text.startsWith("small")).length, 2, "small has more than 2 in flight");
  const o0 = Date.now();
  await Promise.all(Array.from({ length: 4 }, (_, i) => other.chat.completions.create(say(`other ${i} #delay=400`))));
  const otherTook = Date.now() - o0;
  assert.ok(otherTook < 1000, "other tenant's 4 parallel requests took " + otherTook + " ms behind small's limit");
  await Promise.all(smallReqs);
  // 6 requests of 400 ms, 2 at a time: three waves
  assert.ok(Math.max(...smallDone) >= 1150, "small finished in " + Math.max(...smallDone) + " ms");
  // never more than 2 of small's requests started within one 400 ms span
  const starts = up.log().filter((e) => e.text.startsWith("small")).map((e) => e.t_ms).sort((a, b) => a - b);
  for (let i = 2; i < starts.length; i++) assert.ok(starts[i] - starts[i - 2] >= 380, "starts " + starts.join(","));

  // rpm 60: a bucket of 60, refilled at one a second; the 61st and 62nd wait
  const rated = client(gp, "k-rated");
  const r0 = Date.now();
  const took = await Promise.all(Array.from({ length: 62 }, (_, i) =>
    rated.chat.completions.create(say(`rated ${i} #tokens=1`)).then(() => Date.now() - r0)));
  took.sort((a, b) => a - b);
  assert.ok(took[59] < 1200, "the first 60 took " + took[59] + " ms");
  assert.ok(took[61] >= 1500, "the 62nd came after " + took[61] + " ms: rpm 60 not enforced");
});

// ---------------------------------------------------------------- hang-up while queued

gwtest("a client hanging up while queued leaves the queue and never reaches the upstream", async (w) => {
  const up = await w.upstream("u1");
  const gp = await w.gpupool(config({ upstreams: [up], tenants: [{ id: "alice", key: "k-alice" }],
    limits: "{max_concurrent: 1, max_rps: 0, max_tokens_per_sec: 0}" }));
  const ai = client(gp, "k-alice");
  const blocker = bg(ai.chat.completions.create(say("blocker #hold")));
  await until("the blocker at the upstream", async () => (await up.stats()).held === 1, 10000, blocker);
  const ac = new AbortController();
  const gone = ai.chat.completions.create(say("hung-up"), { signal: ac.signal }).then(() => "answered", (e) => e);
  const stays = bg(ai.chat.completions.create(say("stays #tokens=2")));
  await until("two queued", async () => (await gwStats(gp)).total_queued_now === 2, 10000, stays);
  const q = await gp.admin("/admin/scheduler/queues");
  assert.ok(JSON.stringify(q).length > 2, "queues: " + JSON.stringify(q));
  ac.abort();
  assert.ok((await gone) instanceof Error, "the aborted call answered");
  await until("the queue to drop to 1 after the hang-up", async () => (await gwStats(gp)).total_queued_now === 1, 5000);
  await up.release();
  await blocker;
  assert.equal((await stays).choices[0].message.content, "tok0 tok1");
  const texts = up.log().map((e) => e.text);
  assert.deepEqual(texts, ["blocker #hold", "stays #tokens=2"], "the hung-up request reached the upstream");
  const st = await gwStats(gp);
  assert.equal(st.total_queued_now, 0);
  if ("client_gone_while_queued" in st) assert.equal(st.client_gone_while_queued, 1);
});

// ---------------------------------------------------------------- upstream failure, failover

gwtest("upstream errors come back OpenAI-shaped; a cut answer is an error, not a hang", async (w) => {
  const up = await w.upstream("u1");
  const gp = await w.gpupool(config({ upstreams: [up], tenants: [{ id: "alice", key: "k-alice" }] }));
  const ai = client(gp, "k-alice");
  const e = await ai.chat.completions.create(say("boom #fail500")).then(() => null, (x) => x);
  assert.ok(e instanceof OpenAI.APIError && e.status >= 500, "expected 5xx, got " + e);
  assert.equal(typeof e.error?.message, "string");
  // the upstream's own 4xx passes through as it is
  const e4 = await ai.chat.completions.create(say("bad #fail=422")).then(() => null, (x) => x);
  assert.equal(e4?.status, 422);
  // an answer cut mid-stream ends the client's stream with an error
  const cut = await (async () => {
    const s = await ai.chat.completions.create(say("cut #close #tokens=10", { stream: true }));
    let n = 0;
    for await (const c of s) if (c.choices[0]?.delta?.content) n++;
    return n;
  })().then((n) => "completed with " + n + " tokens", (x) => x);
  assert.ok(cut instanceof Error, "a cut stream " + cut);
  // and the gateway still serves
  assert.equal((await ai.chat.completions.create(say("after #tokens=1"))).choices[0].message.content, "tok0");
});

gwtest("a stalled upstream is cut after idle_timeout_sec with a 5xx, not left hanging", async (w) => {
  const up = await w.upstream("u1");
  const gp = await w.gpupool(config({ upstreams: [up], tenants: [{ id: "alice", key: "k-alice" }],
    extra: "  idle_timeout_sec: 1\n" }));
  const ai = client(gp, "k-alice");
  const t0 = Date.now();
  const e = await ai.chat.completions.create(say("never #stall")).then(() => null, (x) => x);
  const took = Date.now() - t0;
  assert.ok(e instanceof OpenAI.APIError && e.status >= 500, "expected 5xx, got " + e);
  assert.equal(typeof e.error?.message, "string");
  note(`stalled upstream: ${e.status} after ${took} ms`);
  // the model's only upstream still serves the next request
  assert.equal((await ai.chat.completions.create(say("after #tokens=1"))).choices[0].message.content, "tok0");
  assert.ok(took >= 900 && took < 3000, "answered after " + took + " ms with idle_timeout_sec 1");
});

gwtest("failover: a failing or dead upstream is skipped and its model keeps answering", async (w) => {
  const a = await w.upstream("a");
  const b = await w.upstream("b");
  const gp = await w.gpupool(config({ upstreams: [a, b], tenants: [{ id: "alice", key: "k-alice" }],
    extra: "  upstream_down_sec: 1\n" }));
  const ai = client(gp, "k-alice");
  // both healthy: both get work (least loaded first)
  await Promise.all(Array.from({ length: 8 }, (_, i) => ai.chat.completions.create(say(`warm ${i} #delay=200 #tokens=1`))));
  assert.ok(a.log().length > 0 && b.log().length > 0, `a ${a.log().length}, b ${b.log().length}`);

  // a answers 503 to everything: every request still succeeds, from b
  await a.failAll(true);
  const before = b.log().length;
  for (let i = 0; i < 10; i++) {
    const r = await ai.chat.completions.create(say(`during ${i} #tokens=1`));
    assert.equal(r.choices[0].message.content, "tok0");
  }
  assert.equal(b.log().length - before, 10, "b did not serve all 10");

  // a comes back, b dies: requests succeed from a
  await a.failAll(false);
  await sleep(1500); // past upstream_down_sec
  b.kill();
  const aBefore = a.log().length;
  for (let i = 0; i < 10; i++) {
    const r = await ai.chat.completions.create(say(`after ${i} #tokens=1`));
    assert.equal(r.choices[0].message.content, "tok0");
  }
  assert.equal(a.log().length - aBefore, 10, "a did not serve all 10");
});
