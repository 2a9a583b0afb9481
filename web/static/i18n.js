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
    iso_watchdog: "watchdog", iso_mps: "MPS", iso_mig: "MIG", iso_none: "no isolation", f_isolation: "isolation",
    compute_pct: "{0}% of its compute", mps_failed: "MPS daemon could not start: {0}",
    gpu_shared: "{0} tasks", tiers: "Priority tiers", tier: "P{0}", tier_names: "critical,,high,,,normal,,low,,background",
    queued_tasks: "Queued tasks in dispatch order", queue_empty: "Nothing is waiting.",
    col_position: "#", col_id: "ID", col_name: "Name", col_tenant: "Tenant", col_priority: "Priority",
    col_gpus: "GPUs", col_wait: "Waiting", col_reason: "Why it waits", col_kind: "Kind", col_state: "State",
    col_submitted: "Submitted", col_gpus_held: "GPUs held", col_running: "Running", col_queued: "Queued",
    col_memory: "GPU memory", col_gpu_hours: "GPU-hours since start", col_quota: "Quota in force (use / limit)",
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
    col_expected: "Expected start", expected_now: "any moment", expected_in: "in {0}", confidence: "{0}% sure",
    f_expected: "expected start", f_estimate: "predicted run time",
    estimate_of: "{0}, learned from {2} runs of the same {1} ({3}% sure)",
    from_task: "command", from_name: "name", from_user: "user", from_tenant: "tenant", from_size: "size",
    q_gpus: "GPUs {0} / {1}", q_running: "running {0} / {1}", q_queued: "queued {0} / {1}",
    q_guaranteed: "guaranteed {0} GPUs", q_time_rule: "time rule",
    q_configured: "A time rule is in force; configured: max_gpus {0}, max_concurrent {1}, max_queued {2}, guaranteed_gpus {3} (0 = no limit)",
    q_unknown: "not configured", not_billed: "not billed",
    not_billed_title: "An internal department: usage is reported, no balance is kept", kind_internal: "internal",
    col_user: "User", col_exit: "Exit", col_duration: "Duration", col_workdir: "Directory",
    newer: "‹ Newer", older: "Older ›", page_of: "Page {0} · {1}", kind_array: "array",
    array_elems: "{0} tasks, {1} on this page", f_user: "user", f_array: "array", f_workdir: "directory",
    f_duration: "duration", filter_size: "Per page",
    runs_title: "Runs", runs_none: "It has not started yet.", col_run: "Run", col_peak: "Peak mem",
    run_why: "Why it ended: {0}", exit_is: "(exit {0})", state_preempted: "preempted", state_requeued: "requeued",
    col_latency: "Latency p50 / p95", col_ttft: "First token p50 / p95", col_tps: "Tokens/s p50 / p95",
    gw_timed: "{0} answered requests measured",
    gw_timing_note: "Latency: from a request's arrival (its wait in the queue included) to the end of its answer; first token: to the answer's first byte from the upstream; tokens/s: completion tokens over generation time (streamed: from the first byte). Answered requests since the server started.",
    tenants_empty: "No tenant has used the pool yet.", no_quota: "none",
    col_month_hours: "GPU-hours this month", col_month_cost: "Cost this month", col_balance: "Balance",
    quota_note: "Quotas and balances appear here once tenants are configured.",
    chart_tenant_gpus: "GPUs held per tenant, last 10 minutes",
    gateway_off_title: "Gateway not configured",
    gateway_off_text: "The OpenAI-compatible gateway is not configured on this server, so there are no models, upstreams, tokens or gateway queue to show.",
    gw_stat_admitted: "Requests admitted", gw_stat_queued: "Waiting now / max queue", gw_stat_in_flight: "In flight",
    gw_stat_rejected: "Rejected (queue full)", gw_stat_timeouts: "Timed out in queue", gw_stat_upstream_errors: "Upstream errors",
    gw_stat_retries: "Retries", gw_stat_context: "Context-length errors", gw_stat_upstreams_up: "Upstreams up",
    gw_models: "Models", gw_upstreams: "Upstreams", gw_queues: "Gateway queue by tier", gw_tenants: "Tenants",
    gw_models_empty: "No model is configured.",
    gw_upstreams_empty: "No upstream yet (a served model's replicas appear here once they are up).",
    gw_tenants_empty: "No tenant has sent a request to the gateway yet.",
    col_model: "Model", col_in_flight: "In flight", col_requests: "Requests", col_prompt_tokens: "Prompt tokens",
    col_completion_tokens: "Completion tokens", col_last_used: "Last used", col_unloaded: "Times unloaded",
    col_url: "URL", col_health: "Health", col_failures: "Failures", col_tier: "Tier", col_waiting_now: "Waiting",
    col_queue_share: "Share of max queue", col_free_slots: "Free slots (all tiers)", col_rejected: "Rejected",
    gw_up: "healthy", gw_down: "down", gw_never: "never", gw_just_now: "just now",
    gw_queue_note: "All tiers share one queue of {0} requests; beyond it requests get 429. Clients that left while queued: {1}.",
    gw_note: "Token counts asked of upstreams (/tokenize): {0}, decided by the estimate instead: {1}. Served replicas unloaded as least recently used: {2}.",
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
    nav_nodes: "Nodes", nodes_title: "Nodes", nodes_empty: "No nodes.", col_node: "Node", col_gpus_busy: "GPUs busy",
    col_gpu_model: "GPU model", col_labels: "Labels", col_heartbeat: "Last heartbeat", col_address: "Address",
    col_cpus: "CPUs", col_mem_free: "Memory free", col_disk_free: "Disk free", col_version: "Version",
    node_gpus: "{0}: {1} GPUs", node_title: "Node {0}", stat_cpus: "CPUs", stat_mem_free: "memory free",
    stat_disk_free: "disk free", stat_version: "version", stat_readings: "last readings",
    node_ready: "ready", node_draining: "draining", node_lost: "lost", node_left: "left",
    nodes_note: "Every node also has the label gpupool/node=NAME. Nodes join with gpupool agent (docs/deployment.md).",
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
    iso_watchdog: "看门狗", iso_mps: "MPS", iso_mig: "MIG", iso_none: "无隔离", f_isolation: "隔离方式",
    compute_pct: "{0}% 算力", mps_failed: "MPS 守护进程无法启动：{0}",
    tiers: "优先级队列", tier: "P{0}", tier_names: "紧急,,高,,,普通,,低,,后台",
    queued_tasks: "按调度顺序排列的排队任务", queue_empty: "没有等待中的任务。", col_position: "序号",
    col_id: "ID", col_name: "名称", col_tenant: "租户", col_priority: "优先级", col_gpus: "GPU",
    col_wait: "已等待", col_reason: "等待原因", col_kind: "类型", col_state: "状态", col_submitted: "提交时间",
    col_gpus_held: "占用 GPU", col_running: "运行中", col_queued: "排队", col_memory: "显存",
    col_gpu_hours: "启动以来 GPU 小时", col_quota: "生效配额（用量 / 上限）", col_alert: "告警", col_subject: "对象",
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
    col_expected: "预计开始", expected_now: "即将开始", expected_in: "约 {0} 后", confidence: "把握 {0}%",
    f_expected: "预计开始", f_estimate: "预计运行时长",
    estimate_of: "{0}，根据同一{1}的 {2} 次运行估计（把握 {3}%）",
    from_task: "命令", from_name: "名称", from_user: "用户", from_tenant: "租户", from_size: "规模",
    q_gpus: "GPU {0} / {1}", q_running: "运行 {0} / {1}", q_queued: "排队 {0} / {1}",
    q_guaranteed: "保底 {0} 块 GPU", q_time_rule: "时间规则",
    q_configured: "时间规则生效中；配置值：max_gpus {0}，max_concurrent {1}，max_queued {2}，guaranteed_gpus {3}（0 = 不限）",
    q_unknown: "未配置", not_billed: "不计费", not_billed_title: "内部部门：只统计用量，不记余额", kind_internal: "内部",
    col_user: "用户", col_exit: "退出码", col_duration: "时长", col_workdir: "目录",
    newer: "‹ 较新", older: "较旧 ›", page_of: "第 {0} 页 · {1}", kind_array: "任务数组",
    array_elems: "共 {0} 个任务，本页 {1} 个", f_user: "用户", f_array: "任务数组", f_workdir: "目录", f_duration: "时长", filter_size: "每页",
    runs_title: "运行记录", runs_none: "尚未开始运行。", col_run: "第几次", col_peak: "显存峰值",
    run_why: "结束原因：{0}", exit_is: "（退出码 {0}）", state_preempted: "被抢占", state_requeued: "重新排队",
    col_latency: "延迟 p50 / p95", col_ttft: "首 token p50 / p95", col_tps: "token/秒 p50 / p95",
    gw_timed: "已测量 {0} 个已应答请求",
    gw_timing_note: "延迟：从请求到达（含排队等待）到应答结束；首 token：到上游应答的第一个字节；token/秒：生成的 token 数除以生成时间（流式：从第一个字节算起）。统计自服务器启动以来已应答的请求。",
    tenants_empty: "还没有租户使用资源池。", no_quota: "无",
    col_month_hours: "本月 GPU 小时", col_month_cost: "本月费用", col_balance: "余额",
    quota_note: "配置租户后，这里会显示配额和余额。", chart_tenant_gpus: "各租户占用的 GPU（最近 10 分钟）",
    gateway_off_title: "未配置网关",
    gateway_off_text: "此服务器没有配置 OpenAI 兼容网关，因此没有模型、上游、token 或网关队列可显示。",
    gw_stat_admitted: "已接纳请求", gw_stat_queued: "当前排队 / 队列上限", gw_stat_in_flight: "处理中",
    gw_stat_rejected: "已拒绝（队列已满）", gw_stat_timeouts: "排队超时", gw_stat_upstream_errors: "上游错误",
    gw_stat_retries: "重试", gw_stat_context: "上下文超长错误", gw_stat_upstreams_up: "可用上游",
    gw_models: "模型", gw_upstreams: "上游", gw_queues: "网关队列（按优先级）", gw_tenants: "租户",
    gw_models_empty: "没有配置模型。",
    gw_upstreams_empty: "暂无上游（托管模型的副本启动后会显示在这里）。",
    gw_tenants_empty: "还没有租户向网关发送请求。",
    col_model: "模型", col_in_flight: "处理中", col_requests: "请求数", col_prompt_tokens: "提示 token",
    col_completion_tokens: "生成 token", col_last_used: "最近使用", col_unloaded: "卸载次数",
    col_url: "地址", col_health: "状态", col_failures: "失败", col_tier: "优先级", col_waiting_now: "排队",
    col_queue_share: "占队列上限", col_free_slots: "剩余名额（所有优先级）", col_rejected: "已拒绝",
    gw_up: "正常", gw_down: "不可用", gw_never: "从未", gw_just_now: "刚刚",
    gw_queue_note: "所有优先级共用一个上限为 {0} 个请求的队列；超过时返回 429。排队期间离开的客户端：{1}。",
    gw_note: "向上游请求token 计数（/tokenize）：{0} 次，改用估算判断：{1} 次。作为最久未用而卸载的托管副本：{2} 个。",
    alerts_active: "触发中和待定", alerts_resolved: "最近恢复", alerts_rules: "规则",
    alerts_empty: "没有触发中的告警。", alert_firing: "触发中", alert_pending: "待定", yes: "是", no: "否",
    inactive_note: "租户有配额后生效", webhook_on: "告警也会发送到配置的 Webhook（{0} 条待发送）。",
    webhook_off: "未配置 Webhook；告警在此列出并写入日志。", key_title: "API 密钥",
    key_text: "此服务器需要 API 密钥。密钥只保存在本浏览器中。", key_bad: "密钥无效。", key_save: "使用此密钥",
    key_forget: "忘记密钥", forbidden: "此密钥无权查看此页面。",
    loopback_only: "此服务器未配置 API 密钥，因此只服务本机的客户端。", unreachable: "无法连接服务器，正在重试…",
    none: "—", seconds: "{0} 秒", minutes: "{0} 分钟", hours: "{0} 小时", ago: "{0}前",
    nav_nodes: "节点", nodes_title: "节点", nodes_empty: "没有节点。", col_node: "节点", col_gpus_busy: "GPU 忙/总",
    col_gpu_model: "GPU 型号", col_labels: "标签", col_heartbeat: "最近心跳", col_address: "地址",
    col_cpus: "CPU 数", col_mem_free: "可用内存", col_disk_free: "可用磁盘", col_version: "版本",
    node_gpus: "{0}：{1} 块 GPU", node_title: "节点 {0}", stat_cpus: "CPU 数", stat_mem_free: "可用内存",
    stat_disk_free: "可用磁盘", stat_version: "版本", stat_readings: "最近读数",
    node_ready: "就绪", node_draining: "排空中", node_lost: "失联", node_left: "已移除",
    nodes_note: "每个节点还带有标签 gpupool/node=名称。节点通过 gpupool agent 加入（见 docs/deployment.md）。",
  };
  /* the scheduler's reasons (reason_detail.code from the server; {0}.. its
   * args, {x} where the GPU-model glob and node labels go): only the other
   * languages need them, English comes whole from the server */
  const reasons = {
    zh: {
      array_limit: "作业数组 {0} 最多同时运行 {1} 个（%{1}）",
      quota_tasks: "租户 {0} 的配额：已运行 {1} / {2} 个任务",
      quota_gpus_never: "租户 {0} 的配额：此任务需要 {1} 块 GPU，超过其上限 {2}",
      quota_gpus_full: "租户 {0} 的配额：已使用 {1} / {2} 块 GPU",
      quota_gpus: "租户 {0} 的配额：已使用 {1} / {2} 块 GPU，此任务还需要 {3}",
      group_share: "组 {0} 已达到其 {1}% 的份额",
      no_memory_most: "没有{x} GPU 有 {0} MB 空闲显存（最多空闲：{1} MB）",
      no_memory: "没有{x} GPU 有 {0} MB 空闲显存",
      no_whole_gpu: "没有空闲的整块{x} GPU",
      no_cpus: "等待：需要 {0} 个 CPU，{x}节点上最多空闲 {1} 个",
      no_host_memory: "等待：需要 {0} MB 内存，{x}节点上最多空闲 {1} MB",
      gang_whole_most: "等待同一节点上 {0} 块整块{x} GPU（单节点最多空闲：{1}）",
      gang_whole: "等待同一节点上 {0} 块整块{x} GPU",
      models_per_gpu: "每块放得下的{x} GPU 都已装有 {0} 个模型（max_models_per_gpu）",
      whole_nodes_most: "等待合计 {0} 块 GPU 的整个节点{x}（空闲的整节点共有 {1} 块）",
      whole_nodes: "等待合计 {0} 块 GPU 的整个节点{x}",
      elastic_nodes_most: "等待 {0} 个整节点{x}（现在完全空闲的：{1} 个）",
      elastic_nodes: "等待 {0} 个整节点{x}",
      gang_shared: "等待同一节点上 {0} 块各有 {1} MB 空闲显存的{x} GPU",
      no_usable_gpu: "所有{x} GPU 都已排空、故障或被保留",
      behind_higher: "排在任务 {0}（P{1}）之后，它是下一个获得 GPU 的任务；设置 timeout_s 可让本任务回填",
      would_delay: "只放得下为任务 {0} 预留的 GPU；回填需要 timeout_s <= {1} 秒",
      would_delay_unknown: "只放得下为任务 {0} 预留的 GPU，而它的开始时间未知",
      depth: "等待中：前面有超过 {0} 个任务先被考察",
      hol: "排在任务 {0} 之后（回填已关闭）",
      behind_next: "排在任务 {0} 之后，它是下一个获得 GPU 的任务",
      behind_own: "排在本租户的任务 {0} 之后：配额为它保留（先启动本任务会推迟它）",
      waiting_whole: "等待调度（需要 {0} 块整块 GPU）",
      waiting_shared: "等待调度（需要 {0} 块各有 {2} MB 空闲显存的 GPU）",
      behind_higher_hidden: "排在另一租户的一个任务（P{1}）之后，它是下一个获得 GPU 的任务；设置 timeout_s 可让本任务回填",
      would_delay_hidden: "只放得下为另一租户的一个任务预留的 GPU；回填需要 timeout_s <= {1} 秒",
      would_delay_unknown_hidden: "只放得下为另一租户的一个任务预留的 GPU，而它的开始时间未知",
      hol_hidden: "排在另一租户的一个任务之后（回填已关闭）",
      behind_next_hidden: "排在另一租户的一个任务之后，它是下一个获得 GPU 的任务",
      reserved: "；排在下一个，GPU 已预留",
      x_glob: "匹配 '{0}' 的",
      x_labels: "（标签为 {0} 的节点上）",
      /* the server's own reasons (reason_detail.code of a task that is not
       * queued, of a run, note_reason of a queued one: server/reason-code.c) */
      note_sep: "；",
      requeued: "已重新排队（第 {0} 次重试，共 {1} 次）：{2}",
      stopping: "正在停止：{0}",
      oom_more: "{0}；现在申请 {1} MB（原为 {2} MB）",
      notice_exit: "{0}；在通知期内以退出码 {1} 结束（{2}）",
      could_not_requeue: "重启后无法重新排队：{0}",
      cancelled_request: "已按请求取消",
      cancelling_notice: "正在取消：已发送 SIG{0}，{1} 秒后（其通知期）发送 SIGTERM，再过 {2} 秒发送 SIGKILL",
      cancelling: "正在取消：已发送 SIGTERM，{0} 秒后发送 SIGKILL",
      cancelled: "已取消",
      preempted: "已被抢占",
      released_unstarted: "启动前已被释放",
      released_exit_preempted: "持有者在被抢占后释放，退出码 {0}",
      released_exit: "持有者已释放，退出码 {0}",
      released_preempted: "持有者在被抢占后释放",
      released: "持有者已释放",
      no_result: "其监督进程结束时没有记录结果",
      preempted_gpus: "已被抢占（{0} 次）：其 GPU 让给了更紧急的任务，或归还给保底配额",
      preempted_lease: "已被抢占（{0} 次）：宽限期 {2} 秒过后租用被收回",
      preempted_run: "其 GPU 让给了更紧急的任务，或归还给保底配额",
      queue_timeout: "等待时间超过 queue_timeout_s（{0} 秒）",
      borrowing_backfill: "借用中：通过回填启动；运行在保证给其他租户的 GPU 上，他们可能收回这些 GPU（届时本任务会像可抢占任务一样被抢占）",
      borrowing: "借用中：运行在保证给其他租户的 GPU 上，他们可能收回这些 GPU（届时本任务会像可抢占任务一样被抢占）",
      backfill: "通过回填启动",
      lease_expired: "租用已过期：{0} 秒内没有心跳",
      lease_timeout: "租用持有时间超过 timeout_s（{0} 秒）",
      supervisor_failed: "无法启动其监督进程：{0}",
      timed_out: "运行超时（{0} 秒）",
      fenced_unstarted: "启动前已被隔离停止：其节点与服务器失去联系",
      fenced: "已被隔离停止：其节点与服务器失去联系",
      killed_signal: "被信号 {0} 终止",
      exited: "已退出，退出码 {0}",
      workdir_run_as: "无法以 run_as 用户进入工作目录 {0}：{1}",
      workdir: "无法进入工作目录 {0}：{1}",
      run_as_user: "run_as {0}：无法切换为该用户：{1}",
      cannot_run: "无法运行 {0}：{1}",
      supervisor_exec: "监督进程无法启动命令：{0}",
      node_lost_fenced: "节点 {0} 失联：{1} 秒内没有心跳；其上的运行已被隔离停止",
      node_lost: "节点 {0} 失联：{1} 秒内没有心跳",
      node_fenced: "节点 {0} 与服务器失去联系，其运行已被隔离停止",
      node_removed: "节点 {0} 已从资源池中移除",
      node_lost_run: "节点 {0} 上的运行已丢失",
      gpus_gone: "它的 GPU 已不在资源池中",
      gpu_failed_why: "GPU {0}:{1} 故障：{2}",
      gpu_failed: "GPU {0}:{1} 故障",
      memory_exceeded: "memory_exceeded：在其一块 GPU 上用了 {0} MB，超过申请的 {1} MB",
      gpu_oom: "gpu_out_of_memory：其输出中有“{0}”（{1}）",
      pool_may_grow: "目前池中没有节点放得下它（{0}）；它在等待节点加入：{1}",
      grow_token: "有一个有效的 join token",
      grow_node_lost: "节点 {0} 已失联，可能会回来",
      no_gpus: "池中没有 GPU",
      no_labels: "没有节点带有标签 '{0}'（node_selector）",
      no_model: "没有匹配 gpu_model '{0}' 的 GPU",
      no_gpu_memory: "没有 GPU 有 {0} MB 可用显存（最大：扣除 {2} MB 安全余量后为 {1} MB）",
      no_whole_node: "需要合计 {0} 块 GPU 的整个节点，但没有节点能整个放下",
      too_few_nodes: "需要 {0} 个各有 {1} 块 GPU 的整节点，现有 {2} 个",
      elastic_one_node: "弹性任务只在一个节点上运行：没有节点有 {0} 块放得下的 GPU（单节点最多：{1}）",
      no_node_fits: "没有节点有 {0} 块放得下的 GPU（单节点最多：{1}）",
    },
  };
  /* what the server adds after a reason (reason_detail.note: a time rule in
   * force, a requeue or preemption, nodes not synced yet), and the one
   * reason it says in English only (the pool may grow), as the server
   * writes them (server/daemon.c, server/nodes.c): said again in the other
   * languages; a part not matched stays in the server's words */
  const notes = {
    zh: [
      [/ \(time rule (.+?) in force\)/g, "（时间规则 $1 生效中）"],
      [/; requeued \(retry (\d+) of (\d+)\): /g, "；已重新排队（第 $1 次重试，共 $2 次）："],
      [/; preempted \((\d+) times?\): its GPUs went to a more urgent task or back to their guarantee/g,
        "；已被抢占（$1 次）：其 GPU 让给了更紧急的任务，或归还给保底配额"],
      [/; preempted \((\d+) times?\): the lease was lost after the (\d+) s grace period/g,
        "；已被抢占（$1 次）：宽限期 $2 秒过后租用被收回"],
      [/ \((\d+) nodes? not synced since the server started: no work there until its agent reports\)/g,
        "（$1 个节点自服务器启动后尚未同步：其 agent 报告之前不会在上面分配任务）"],
      /* why it is back in the queue (server/nodes.c, server/daemon.c) */
      [/node (\S+) lost contact with the server; its run was fenced/g, "节点 $1 与服务器失去联系，其运行已被隔离停止"],
      [/node (\S+) was removed from the pool/g, "节点 $1 已从资源池中移除"],
      [/node (\S+) lost its run/g, "节点 $1 上的运行已丢失"],
      [/its GPUs are no longer in the pool/g, "它的 GPU 已不在资源池中"],
      [/GPU (\S+) failed/g, "GPU $1 故障"],
      /* why a run ended (a run's reason, GET /api/v1/tasks/{id}/runs: server/daemon.c preempt()) */
      [/^its GPUs went to a more urgent task or back to their guarantee$/, "其 GPU 让给了更紧急的任务，或归还给保底配额"],
      [/^no node in the pool can hold it now \((.*)\); it waits for one to join: a join token is live$/,
        "目前池中没有节点放得下它（$1）；它在等待新节点加入：有一个有效的 join token"],
      [/^no node in the pool can hold it now \((.*)\); it waits for one to join: node (\S+) is lost and may come back$/,
        "目前池中没有节点放得下它（$1）；它在等待节点加入：节点 $2 已失联，可能会回来"],
    ],
  };
  function sayNotes(text) {
    let s = text || "";
    (notes[lang] || []).forEach(([re, to]) => { s = s.replace(re, to); });
    return s;
  }
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
    /* a server-made reason in this language: the server's words when the
     * reason has no code this page knows (or the page is in English) */
    reason(text, d) {
      const r = reasons[lang];
      if (!r || !d || !d.code || !r[d.code]) return sayNotes(text);
      let x = "";
      if (d.glob) x += r.x_glob.split("{0}").join(d.glob);
      let s = r[d.code];
      if (d.labels) s = s.split("{x}").join(x + "{x}") + r.x_labels.split("{0}").join(d.labels);
      s = s.split("{x}").join(d.labels ? "" : x);
      /* an argument that is itself a reason ({text, code, args}) is said too */
      (d.args || []).forEach((a, i) => {
        s = s.split("{" + i + "}").join(a && typeof a === "object" ? I18N.reason(a.text, a) : String(a));
      });
      if (d.reserved) s += r.reserved;
      let note = d.note || "", tail = "";
      const nr = d.note_reason;
      if (nr && nr.text && note.endsWith("; " + nr.text)) {
        note = note.slice(0, note.length - nr.text.length - 2);
        tail = r.note_sep + I18N.reason(nr.text, nr);
      }
      return s + sayNotes(note) + tail;
    },
    apply(root) {
      document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
      (root || document).querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = I18N.t(el.dataset.i18n); });
    },
  };
})();
