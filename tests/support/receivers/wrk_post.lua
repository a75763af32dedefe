-- wrk_post.lua: wrk's requests for measuring a webhook receiver: POSTs of a ~200-byte
-- JSON body, each with its own webhook-id (the run's tag, given after `--`, the thread
-- number and a counter) and outboxd-attempt 1, like outboxd's deliveries; at the end one JSON line with the
-- figures (requests, non-2xx answers, socket errors, duration). Used by the harness's
-- wrk_best_rate (tests/support/harness_receivers.c) and bench/small_receiver.sh.
local threads = {}
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
  table.insert(threads, thread)
end

function init(args)
  tag = args[1] or "run"
  counter = 0
  body = '{"seq":0,"pad":"' .. string.rep("x", 182) .. '"}'
end

function request()
  counter = counter + 1
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["webhook-id"] = string.format("wrk-%s-%d-%d", tag, id, counter),
    ["outboxd-attempt"] = "1",
  }, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"status_errors":%d,"socket_errors":%d,"timeouts":%d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    e.timeout))
end
