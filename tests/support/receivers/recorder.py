"""recorder.py: what the Python receivers share: the record of every request's webhook-id
and outboxd-attempt headers, and a control server on its own port that shows it.

The tests' harness (tests/support/harness_receivers.c) reads the record through
GET /_control/stats and clears it with POST /_control/reset. The control server runs on a
separate port, in its own thread, so that reading the stats never waits in the queue of
the server under test, and the server under test stays exactly as a user writes it. It
must not change how the receiver answers.
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Recorder:
    """Requests, unique webhook-ids, duplicates (requests beyond the first per
    webhook-id), and among them those whose outboxd-attempt no earlier request of the
    same id had (another try, which outboxd records; two tries can arrive out of order
    when the first waited in the accept queue). Thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.requests = 0
            self.without_id = 0
            self.duplicates = 0
            self.duplicates_retried = 0
            self.attempts = {}  # webhook-id -> the outboxd-attempt numbers seen
            self.in_progress = 0
            self.max_in_progress = 0
            self.last_new_us = 0  # when the answer to the latest first-seen id was sent

    def begin(self, headers):
        """A request arrived (its headers): counts it. True when its webhook-id is seen
        for the first time. Call end() when answered, with what begin() returned."""
        wid = headers.get("webhook-id")
        try:
            attempt = int(headers.get("outboxd-attempt") or 0)
        except ValueError:
            attempt = 0
        with self.lock:
            self.requests += 1
            self.in_progress += 1
            self.max_in_progress = max(self.max_in_progress, self.in_progress)
            if not wid:
                self.without_id += 1
                return
            seen = self.attempts.get(wid)
            if seen is None:
                self.attempts[wid] = {attempt}
                return True
            self.duplicates += 1
            if attempt not in seen:
                self.duplicates_retried += 1
                seen.add(attempt)
        return False

    def end(self, new=False):
        """The request was answered; new: what begin() returned for it."""
        now_us = time.time_ns() // 1000 if new else 0
        with self.lock:
            self.in_progress -= 1
            if now_us > self.last_new_us:
                self.last_new_us = now_us

    def stats(self, extra=None):
        with self.lock:
            doc = {
                "requests": self.requests,
                "unique_ids": len(self.attempts),
                "duplicates": self.duplicates,
                "duplicates_retried": self.duplicates_retried,
                "without_id": self.without_id,
                "max_in_progress": self.max_in_progress,
                "last_new_us": self.last_new_us,
            }
        if extra:
            doc.update(extra())
        return doc


def serve_control(port, recorder, extra_stats=None, on_post=None):
    """Starts the control server on 127.0.0.1:port in a daemon thread. extra_stats() adds
    fields to the stats; on_post(path, query, body) answers other POSTs under /_control/
    with a dict (None: 404)."""

    class Control(BaseHTTPRequestHandler):
        def answer(self, status, doc):
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path.split("?")[0] == "/_control/stats":
                self.answer(200, recorder.stats(extra_stats))
            else:
                self.answer(404, {"error": "not found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path, _, query = self.path.partition("?")
            if path == "/_control/reset":
                recorder.reset()
                self.answer(200, {"ok": True})
                return
            doc = on_post(path, query, body) if on_post else None
            if doc is None:
                self.answer(404, {"error": "not found"})
            else:
                self.answer(200, doc)

        def log_message(self, fmt, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Control)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
