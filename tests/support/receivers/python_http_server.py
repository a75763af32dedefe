"""python_http_server.py: a webhook receiver as a user writes one with Python's standard
library: http.server.ThreadingHTTPServer and a BaseHTTPRequestHandler subclass answering
200 to POST, every default left alone (HTTP/1.0, so one connection per request; a listen
backlog of 5; a thread per connection; a log line per request on stderr).

    python3 python_http_server.py --port PORT --control-port CPORT

The only addition is the record of webhook-id and outboxd-attempt (recorder.py), served
on CPORT. It must stay a plain http.server: its limits are what the tests measure.
"""
import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from recorder import Recorder, serve_control

RECORDER = Recorder()


class WebhookHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        new = RECORDER.begin(self.headers)
        try:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        finally:
            RECORDER.end(new)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), WebhookHandler)
    serve_control(args.control_port, RECORDER,
                  extra_stats=lambda: {"server": "python http.server"})
    server.serve_forever()


if __name__ == "__main__":
    main()
