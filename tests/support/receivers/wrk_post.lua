-- wrk_post.lua: wrk's requests for measuring a webhook receiver: POSTs of a ~200-byte
-- JSON body with the header set of an outboxd delivery (Accept, Content-Type, webhook-id,
-- webhook-timestamp, outboxd-event-type, outboxd-delivery-id, outboxd-attempt,
-- traceparent, User-Agent), each with its own webhook-id (the run's tag, given after
-- `--`, the thread number and a counter), so the receiver parses what it parses for
-- outboxd; at the end one JSON line with the figures (requests, non-2xx answers, socket
-- errors, duration). A second argument `minimal` sends only Content-Type, webhook-id and
-- outboxd-attempt (a lighter request than outboxd's: what the receiver does at best).
-- Used by the harness's wrk_best_rate (tests/support/harness_receivers.c) and
-- bench/small_receiver.sh.
local threads = {}
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
  table.insert(threads, thread)
end

function init(args)
  tag = args[1] or "run"
  minimal = args[2] == "minimal"
  counter = 0
  body = '{"seq":0,"pad":"' .. string.rep("x", 182) .. '"}'
end

function request()
  counter = counter + 1
  local wid = string.format("wrk-%s-%d-%d", tag, id, counter)
  if minimal then
    return wrk.format("POST", nil, {
      ["Content-Type"] = "application/json",
      ["webhook-id"] = wid,
      ["outboxd-attempt"] = "1",
    }, body)
  end
  return wrk.format("POST", nil, {
    ["Accept"] = "*/*",
    ["Content-Type"] = "application/json",
    ["webhook-id"] = wid,
    ["webhook-timestamp"] = tostring(os.time()),
    ["outboxd-event-type"] = "bench.event",
    ["outboxd-delivery-id"] = string.format("01a21698-48a0-7399-ac50-%04x%08x", id, counter),
    ["outboxd-attempt"] = "1",
    ["traceparent"] = string.format("00-01a2169848a07398a9e3%02x%08x-aecd72fa0900c001-01", id, counter),
    ["User-Agent"] = "outboxd/0.1",
  }, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"status_errors":%d,"socket_errors":%d,"timeouts":%d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    e.timeout))
end
