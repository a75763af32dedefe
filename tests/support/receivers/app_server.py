"""app_server.py: a queueing application server, like gunicorn's sync workers or Puma: W
worker threads, each taking one connection at a time from the shared listen socket,
reading one request, doing WORK ms of work (a sleep: an application waiting on its
database), answering 200 and closing. Requests beyond W wait in the kernel's accept queue
(backlog 2048, gunicorn's default), so its capacity is W / WORK and more in flight only
adds waiting.

    python3 app_server.py --port PORT --control-port CPORT [--workers 4] [--work-ms 20]

The control port (recorder.py) also takes POST /_control/work?ms=N: the work per request
from the next request on (a capacity drop and its return, mid-run). It must not answer
faster than its workers allow: that is what the tests measure.
"""
import argparse
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs

from recorder import Recorder, serve_control

RECORDER = Recorder()
WORK = {"ms": 20}


class AppHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        new = RECORDER.begin(self.headers)
        try:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            time.sleep(WORK["ms"] / 1000.0)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
        finally:
            RECORDER.end(new)

    def log_message(self, fmt, *args):
        pass


class WorkerServer:
    """What BaseHTTPRequestHandler needs of a server: nothing but a name."""
    server_name = "app_server"


def worker(listener):
    while True:
        try:
            conn, addr = listener.accept()
        except OSError:
            return
        try:
            AppHandler(conn, addr, WorkerServer())
        except OSError:
            pass
        finally:
            conn.close()


def on_post(path, query, body):
    if path != "/_control/work":
        return None
    ms = parse_qs(query).get("ms", [None])[0]
    if ms is None or not ms.isdigit():
        return None
    WORK["ms"] = int(ms)
    return {"work_ms": WORK["ms"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--work-ms", type=int, default=20)
    parser.add_argument("--backlog", type=int, default=2048)
    args = parser.parse_args()
    WORK["ms"] = args.work_ms
    listener = socket.create_server(("127.0.0.1", args.port), backlog=args.backlog)
    threads = [threading.Thread(target=worker, args=(listener,), daemon=True)
               for _ in range(args.workers)]
    for t in threads:
        t.start()
    serve_control(args.control_port, RECORDER, on_post=on_post,
                  extra_stats=lambda: {"server": "app server", "workers": args.workers,
                                       "work_ms": WORK["ms"]})
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
