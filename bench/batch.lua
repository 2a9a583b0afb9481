-- wrk script: POST one batch submission (runs `true`) per request (keep-alive).
wrk.method = "POST"
wrk.path = "/api/v1/tasks"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"tenant_id":"bench","name":"b","gpu_request":1,"memory_mb":16,"priority":5,"command":["true"]}'
