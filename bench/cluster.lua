-- wrk script for bench-cluster.sh: POST /api/v1/tasks over keep-alive.
--   wrk ... -s bench/cluster.lua URL -- KIND [N]
-- KIND lease: a lease of 16 MiB (no command, shares a GPU with others);
-- KIND batch: a one-GPU batch task running `true` (a whole GPU).
-- With N, submissions are sent until N have been created (201), then
-- GET /healthz, which stores nothing; the thread then prints
-- "cluster.lua: N answered" so that the driver ends wrk (SIGINT: wrk's own
-- loop runs for -d otherwise).  A request whose connection wrk reopened is
-- never answered, so the last round of connections may create a few more
-- than N (at most -c - 1): the driver counts what the server holds.  Only
-- -t1 is supported (the counts are per thread).
local lease_body = '{"tenant_id":"bench","name":"l","gpu_request":1,"memory_mb":16,"priority":5,"lease_ttl_s":3600}'
local batch_body = '{"tenant_id":"bench","name":"b","gpu_request":1,"priority":5,"command":["true"]}'
local threads = {}
local body, post, health
limit = -1
sent = 0
created = 0
refused = 0
told = false

function setup(thread)
        table.insert(threads, thread)
end

function init(args)
        body = args[1] == "batch" and batch_body or lease_body
        if args[2] then
                limit = tonumber(args[2])
        end
        post = wrk.format("POST", "/api/v1/tasks", {["Content-Type"] = "application/json"}, body)
        health = wrk.format("GET", "/healthz")
end

function request()
        if limit < 0 or created < limit then
                sent = sent + 1
                return post
        end
        return health
end

function response(status, headers, b)
        if status == 201 then
                created = created + 1
        elseif status ~= 200 then
                refused = refused + 1
        end
        -- as many refused as asked for: the driver goes on and prints them (a
        -- server that refuses every submit would keep wrk going for -d)
        if limit >= 0 and not told and (created >= limit or refused >= limit) then
                told = true
                io.write(string.format("cluster.lua: %d answered\n", limit))
                io.flush()
        end
end

function done(summary, latency, requests)
        local c, r = 0, 0
        for _, t in ipairs(threads) do
                c = c + t:get("created")
                r = r + t:get("refused")
        end
        local e = summary.errors
        io.write(string.format("cluster.lua: created %d refused %d in %.6f s; socket errors: connect %d read %d "
                               .. "write %d timeout %d\n", c, r, summary.duration / 1e6, e.connect, e.read, e.write,
                               e.timeout))
end
