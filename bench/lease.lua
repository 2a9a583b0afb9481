-- wrk script: POST one lease submission (no command, 16 MiB) per request (keep-alive).
wrk.method = "POST"
wrk.path = "/api/v1/tasks"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"tenant_id":"bench","name":"b","gpu_request":1,"memory_mb":16,"priority":5,"lease_ttl_s":3600}'
