"""schema_registry.py: a small Confluent-compatible Schema Registry for the end-to-end
tests (tests/support/harness_registry.c starts and stops it), written with Python's
http.server like the receivers of tests/support/receivers/.

    python3 schema_registry.py --port PORT [--first-id N] [--basic-auth USER:PASSWORD]

It serves the two calls a producer makes:
  POST /subjects/{subject}/versions   {"schemaType":"PROTOBUF","schema":"..."} -> {"id":N}
  GET  /schemas/ids/{id}              -> {"schemaType":"PROTOBUF","schema":"..."}
A schema text gets one id, whatever the subject (as a real registry does); ids count up
from --first-id, so a restarted registry given the same --first-id answers the same id
for the same schema. Answers errors as the real one does: {"error_code":N,"message":...}.
With --basic-auth, every call without those credentials gets 401.

GET /_control/stats answers what it recorded: {"registrations": {subject: count},
"requests": n}; POST /_control/hold and /_control/release make registrations wait
(up to 60 s) until released, a registry that does not answer in time. Neither needs
credentials (the harness calls them).
"""
import argparse
import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

LOCK = threading.Lock()
IDS = {}             # schema text -> id
SCHEMAS = {}         # id -> (schema type, text)
REGISTRATIONS = {}   # subject -> POSTs answered with an id
STATE = {"next_id": 1, "requests": 0, "auth": None}
RELEASED = threading.Event()  # cleared while registrations are held
RELEASED.set()


class RegistryHandler(BaseHTTPRequestHandler):
    def answer(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def error(self, status, code, message):
        self.answer(status, {"error_code": code, "message": message})

    def authorized(self):
        if STATE["auth"] is None:
            return True
        want = "Basic " + base64.b64encode(STATE["auth"].encode()).decode()
        if self.headers.get("Authorization") == want:
            return True
        self.error(401, 401, "Unauthorized")
        return False

    def admitted(self):
        """Counts the request; False (401 answered) when its credentials are wrong."""
        with LOCK:
            STATE["requests"] += 1
        return self.authorized()

    def do_GET(self):
        if self.path == "/_control/stats":
            with LOCK:
                self.answer(200, {"registrations": dict(REGISTRATIONS),
                                  "requests": STATE["requests"]})
            return
        if not self.admitted():
            return
        m = re.fullmatch(r"/schemas/ids/(\d+)", self.path)
        if not m:
            self.error(404, 404, "HTTP 404 Not Found")
            return
        with LOCK:
            found = SCHEMAS.get(int(m.group(1)))
        if not found:
            self.error(404, 40403, "Schema not found")
            return
        self.answer(200, {"schemaType": found[0], "schema": found[1]})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path in ("/_control/hold", "/_control/release"):
            if self.path == "/_control/hold":
                RELEASED.clear()
            else:
                RELEASED.set()
            self.answer(200, {"held": not RELEASED.is_set()})
            return
        RELEASED.wait(60)
        if not self.admitted():
            return
        m = re.fullmatch(r"/subjects/([^/]+)/versions", self.path)
        if not m:
            self.error(404, 404, "HTTP 404 Not Found")
            return
        subject = unquote(m.group(1))
        try:
            doc = json.loads(raw)
            schema_type = doc.get("schemaType", "AVRO")
            schema = doc["schema"]
            if not isinstance(schema, str) or not schema:
                raise ValueError("schema must be a non-empty string")
        except (ValueError, KeyError, AttributeError) as e:
            self.error(422, 42201, "Invalid schema: %s" % e)
            return
        if schema_type != "PROTOBUF" or "message " not in schema:
            self.error(422, 42201, "Invalid schema: not a PROTOBUF schema")
            return
        with LOCK:
            if schema not in IDS:
                IDS[schema] = STATE["next_id"]
                SCHEMAS[STATE["next_id"]] = (schema_type, schema)
                STATE["next_id"] += 1
            REGISTRATIONS[subject] = REGISTRATIONS.get(subject, 0) + 1
            schema_id = IDS[schema]
        try:
            self.answer(200, {"id": schema_id})
        except (BrokenPipeError, ConnectionResetError):
            pass  # a held registration its client gave up on

    def log_message(self, fmt, *args):
        # every request on stderr (the harness keeps it in a log file)
        super().log_message(fmt, *args)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--first-id", type=int, default=1)
    parser.add_argument("--basic-auth", default=None)
    args = parser.parse_args()
    STATE["next_id"] = args.first_id
    STATE["auth"] = args.basic_auth
    server = ThreadingHTTPServer(("127.0.0.1", args.port), RegistryHandler)
    server.serve_forever()


if __name__ == "__main__":
    main()
