/* chart.js - a small line chart on <canvas> for the history series
 * (GET /api/v1/monitor/history).  No library: axes, grid, one line per
 * series, gaps where a series has no value for longer than 3 steps. */
"use strict";
window.LineChart = {
  palette: ["#2f6fdf", "#1f9d55", "#d98a00", "#d64545", "#8a4fd8", "#0fa3b1", "#b5651d", "#e05780", "#5c6b7a", "#7cb342"],
  /* series: [{name, points: [[t_ms, v], ...]}]; opts: {t0, t1, max, step_ms, legend (element)} */
  draw(canvas, series, opts) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const L = 40, R = 8, T = 8, B = 22;
    const t0 = opts.t0, t1 = opts.t1;
    let max = opts.max || 0;
    if (!opts.max) {
      for (const s of series) for (const p of s.points) max = Math.max(max, p[1]);
      max = 4 * niceStep(max / 4, opts.integer);
    }
    const x = (t) => L + ((t - t0) / (t1 - t0)) * (w - L - R);
    const y = (v) => T + (1 - v / max) * (h - T - B);
    g.font = "11px system-ui, sans-serif";
    g.strokeStyle = "#e3e8ee";
    g.fillStyle = "#7a8696";
    g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const v = (max * i) / 4, yy = Math.round(y(v)) + 0.5;
      g.beginPath(); g.moveTo(L, yy); g.lineTo(w - R, yy); g.stroke();
      g.textAlign = "right"; g.textBaseline = "middle";
      g.fillText(fmt(v), L - 6, yy);
    }
    g.textAlign = "center"; g.textBaseline = "top";
    const span = t1 - t0;
    for (let i = 0; i <= 5; i++) {
      const t = t0 + (span * i) / 5;
      const d = new Date(t);
      g.fillText(pad(d.getHours()) + ":" + pad(d.getMinutes()) + (span < 3600e3 ? ":" + pad(d.getSeconds()) : ""), x(t), h - B + 6);
    }
    const gap = (opts.step_ms || 1000) * 3.5;
    series.forEach((s, i) => {
      g.strokeStyle = s.color || LineChart.palette[i % LineChart.palette.length];
      g.lineWidth = 2;
      g.beginPath();
      let prev = null;
      for (const p of s.points) {
        if (p[0] < t0) continue;
        if (prev === null || p[0] - prev > gap) g.moveTo(x(p[0]), y(p[1]));
        else g.lineTo(x(p[0]), y(p[1]));
        prev = p[0];
      }
      g.stroke();
    });
    if (opts.legend) {
      const el = opts.legend;
      el.textContent = "";
      series.forEach((s, i) => {
        const span = document.createElement("span");
        const sw = document.createElement("i");
        sw.style.background = s.color || LineChart.palette[i % LineChart.palette.length];
        span.appendChild(sw);
        span.appendChild(document.createTextNode(s.name));
        el.appendChild(span);
      });
    }
    function pad(n) { return n < 10 ? "0" + n : "" + n; }
    function fmt(v) { return v >= 100 || v === Math.round(v) ? String(Math.round(v)) : v.toFixed(1); }
    /* a tick step of 1, 2 or 5 times a power of ten (at least 1 for counts) */
    function niceStep(v, integer) {
      if (!(v > 0)) return integer ? 1 : 0.25;
      const e = Math.pow(10, Math.floor(Math.log10(v)));
      let step = 10 * e;
      for (const m of [1, 2, 5, 10]) if (m * e >= v) { step = m * e; break; }
      return integer ? Math.max(1, Math.round(step)) : step;
    }
  },
};
