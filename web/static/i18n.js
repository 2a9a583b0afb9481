/* i18n.js - the dashboard's words in English and Chinese.  Elements name
 * their text with data-i18n="key"; app.js calls I18N.apply() after a
 * language change.  {0}, {1} are filled by I18N.t(key, a, b). */
"use strict";
(function () {
  const en = {
    sim_badge: "simulated GPUs", nav_overview: "Overview", nav_queue: "Queue", nav_tasks: "Tasks",
    nav_tenants: "Tenants", nav_gateway: "Gateway", nav_alerts: "Alerts", key_button: "API key",
    live_ok: "live", live_stale: "reconnecting…", key_needed: "key needed", live_title: "updated {0}",
    gpus: "GPUs", chart_gpu_util: "GPU utilisation, last 10 minutes (%)",
    chart_queue: "Queued and running tasks, last 10 minutes", queued: "queued", running: "running",
    stat_gpus_busy: "GPUs busy", stat_util: "Mean GPU utilisation", stat_queued: "Queued",
    stat_running: "Running", stat_wait: "Queue wait p95 (5 min)", stat_alerts: "Alerts firing",
    stat_memory: "GPU memory allocated", stat_finished: "Finished (ok / failed)",
    gpu_util: "utilisation", gpu_mem: "memory", gpu_temp: "temperature", gpu_power: "power",
    gpu_clock: "SM clock", gpu_tasks: "tasks", gpu_idle: "idle", gpu_healthy: "healthy",
    gpu_unhealthy: "unhealthy", gpu_drained: "drained", gpu_reserved: "reserved", gpu_sim: "sim",
    gpu_shared: "{0} tasks", tiers: "Priority tiers", tier: "P{0}", tier_names: "critical,,high,,,normal,,low,,background",
    queued_tasks: "Queued tasks in dispatch order", queue_empty: "Nothing is waiting.",
    col_position: "#", col_id: "ID", col_name: "Name", col_tenant: "Tenant", col_priority: "Priority",
    col_gpus: "GPUs", col_wait: "Waiting", col_reason: "Why it waits", col_kind: "Kind", col_state: "State",
    col_submitted: "Submitted", col_gpus_held: "GPUs held", col_running: "Running", col_queued: "Queued",
    col_memory: "GPU memory", col_gpu_hours: "GPU-hours since start", col_quota: "Quota",
    col_alert: "Alert", col_subject: "Subject", col_severity: "Severity", col_value: "Value",
    col_since: "Since", col_started: "Started", col_resolved: "Resolved", col_when: "When",
    col_for: "For", col_clear: "Clear after", col_active: "Active",
    filter_state: "State", filter_text: "Search", state_all: "all", state_active: "active (queued + running)",
    state_queued: "queued", state_running: "running", state_succeeded: "succeeded", state_failed: "failed",
    state_cancelled: "cancelled", state_timeout: "timeout", state_lost: "lost",
    kind_batch: "batch", kind_lease: "lease", tasks_empty: "No tasks.",
    cancel: "Cancel task", cancelling: "Cancelling…", cancel_confirm: "Cancel task {0}?",
    log_tail: "Log (last lines)", log_none: "(no output yet)", log_empty: "(no output)", log_lease: "(a lease has no log)",
    log_big: "(showing the last {0} KB)", f_state: "state", f_reason: "reason", f_gpus: "GPUs",
    f_command: "command", f_exit: "exit code", f_started: "started", f_finished: "finished",
    f_position: "queue position", f_tenant: "tenant", f_priority: "priority", f_memory: "memory per GPU",
    whole_gpu: "whole GPU",
    tenants_empty: "No tenant has used the pool yet.", no_quota: "none",
    col_month_hours: "GPU-hours this month", col_month_cost: "Cost this month", col_balance: "Balance",
    quota_note: "Quotas and balances appear here once tenants are configured.",
    chart_tenant_gpus: "GPUs held per tenant, last 10 minutes",
    gateway_off_title: "Gateway not configured",
    gateway_off_text: "The OpenAI-compatible gateway is not configured on this server, so there are no models, upstreams, tokens or gateway queue to show.",
    alerts_active: "Firing and pending", alerts_resolved: "Recently resolved", alerts_rules: "Rules",
    alerts_empty: "No alert is firing.", alert_firing: "firing", alert_pending: "pending",
    yes: "yes", no: "no", inactive_note: "inactive until tenants have quotas",
    webhook_on: "Alerts are also sent to the configured webhook ({0} waiting).",
    webhook_off: "No webhook is configured; alerts are listed here and logged.",
    key_title: "API key", key_text: "This server needs an API key. It is kept in this browser only.",
    key_bad: "That key was not accepted.", key_save: "Use this key", key_forget: "Forget key",
    forbidden: "This key may not see this page.",
    loopback_only: "No API keys are configured on this server, so only clients on the server's own machine are served.",
    unreachable: "Cannot reach the server; retrying…", none: "—", seconds: "{0} s", minutes: "{0} min",
    hours: "{0} h", ago: "{0} ago",
  };
  const zh = {
    sim_badge: "模拟 GPU", nav_overview: "概览", nav_queue: "队列", nav_tasks: "任务", nav_tenants: "租户",
    nav_gateway: "网关", nav_alerts: "告警", key_button: "API 密钥", live_ok: "实时", live_stale: "正在重连…",
    key_needed: "需要密钥",
    live_title: "更新于 {0}", gpus: "GPU", chart_gpu_util: "GPU 利用率（最近 10 分钟，%）",
    chart_queue: "排队与运行中的任务（最近 10 分钟）", queued: "排队", running: "运行",
    stat_gpus_busy: "忙碌 GPU", stat_util: "平均 GPU 利用率", stat_queued: "排队", stat_running: "运行中",
    stat_wait: "排队等待 p95（5 分钟）", stat_alerts: "告警", stat_memory: "已分配显存",
    stat_finished: "已结束（成功 / 失败）", gpu_util: "利用率", gpu_mem: "显存", gpu_temp: "温度",
    gpu_power: "功耗", gpu_clock: "SM 频率", gpu_tasks: "任务", gpu_idle: "空闲", gpu_healthy: "正常",
    gpu_unhealthy: "故障", gpu_drained: "已排空", gpu_reserved: "保留", gpu_sim: "模拟", gpu_shared: "{0} 个任务",
    tiers: "优先级队列", tier: "P{0}", tier_names: "紧急,,高,,,普通,,低,,后台",
    queued_tasks: "按调度顺序排列的排队任务", queue_empty: "没有等待中的任务。", col_position: "序号",
    col_id: "ID", col_name: "名称", col_tenant: "租户", col_priority: "优先级", col_gpus: "GPU",
    col_wait: "已等待", col_reason: "等待原因", col_kind: "类型", col_state: "状态", col_submitted: "提交时间",
    col_gpus_held: "占用 GPU", col_running: "运行中", col_queued: "排队", col_memory: "显存",
    col_gpu_hours: "启动以来 GPU 小时", col_quota: "配额", col_alert: "告警", col_subject: "对象",
    col_severity: "级别", col_value: "数值", col_since: "开始于", col_started: "开始", col_resolved: "恢复",
    col_when: "条件", col_for: "持续", col_clear: "恢复等待", col_active: "生效",
    filter_state: "状态", filter_text: "搜索", state_all: "全部", state_active: "活动（排队 + 运行）",
    state_queued: "排队", state_running: "运行中", state_succeeded: "成功", state_failed: "失败",
    state_cancelled: "已取消", state_timeout: "超时", state_lost: "丢失", kind_batch: "批处理",
    kind_lease: "租用", tasks_empty: "没有任务。", cancel: "取消任务", cancelling: "正在取消…",
    cancel_confirm: "取消任务 {0}？", log_tail: "日志（最后几行）", log_none: "（暂无输出）", log_empty: "（无输出）",
    log_lease: "（租用没有日志）", log_big: "（显示最后 {0} KB）", f_state: "状态", f_reason: "原因",
    f_gpus: "GPU", f_command: "命令", f_exit: "退出码", f_started: "开始", f_finished: "结束",
    f_position: "队列位置", f_tenant: "租户", f_priority: "优先级", f_memory: "每 GPU 显存", whole_gpu: "整卡",
    tenants_empty: "还没有租户使用资源池。", no_quota: "无",
    col_month_hours: "本月 GPU 小时", col_month_cost: "本月费用", col_balance: "余额",
    quota_note: "配置租户后，这里会显示配额和余额。", chart_tenant_gpus: "各租户占用的 GPU（最近 10 分钟）",
    gateway_off_title: "未配置网关",
    gateway_off_text: "此服务器没有配置 OpenAI 兼容网关，因此没有模型、上游、令牌或网关队列可显示。",
    alerts_active: "触发中和待定", alerts_resolved: "最近恢复", alerts_rules: "规则",
    alerts_empty: "没有触发中的告警。", alert_firing: "触发中", alert_pending: "待定", yes: "是", no: "否",
    inactive_note: "租户有配额后生效", webhook_on: "告警也会发送到配置的 Webhook（{0} 条待发送）。",
    webhook_off: "未配置 Webhook；告警在此列出并写入日志。", key_title: "API 密钥",
    key_text: "此服务器需要 API 密钥。密钥只保存在本浏览器中。", key_bad: "密钥无效。", key_save: "使用此密钥",
    key_forget: "忘记密钥", forbidden: "此密钥无权查看此页面。",
    loopback_only: "此服务器未配置 API 密钥，因此只服务本机的客户端。", unreachable: "无法连接服务器，正在重试…",
    none: "—", seconds: "{0} 秒", minutes: "{0} 分钟", hours: "{0} 小时", ago: "{0}前",
  };
  const dicts = { en: en, zh: zh };
  function pick() {
    const saved = localStorage.getItem("gpupool.lang");
    if (saved && dicts[saved]) return saved;
    const langs = navigator.languages && navigator.languages.length ? navigator.languages : [navigator.language || "en"];
    return String(langs[0] || "en").toLowerCase().startsWith("zh") ? "zh" : "en";
  }
  let lang = pick();
  window.I18N = {
    get lang() { return lang; },
    set(l) { if (dicts[l]) { lang = l; localStorage.setItem("gpupool.lang", l); } },
    t(key) {
      let s = (dicts[lang] && dicts[lang][key]) || en[key] || key;
      for (let i = 1; i < arguments.length; i++) s = s.split("{" + (i - 1) + "}").join(String(arguments[i]));
      return s;
    },
    apply(root) {
      document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
      (root || document).querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = I18N.t(el.dataset.i18n); });
    },
  };
})();
