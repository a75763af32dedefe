#!/usr/bin/python3
"""otlp_decode.py SIGNAL CONTENT_TYPE < BODY: decodes one OTLP/HTTP export request the way
a collector does, with Python code protoc made from the OTLP definitions as released
(proto/opentelemetry; the directory of the generated modules is $OTLP_PYTHON_DIR), and
prints it on stdout in the canonical OTLP JSON: the proto3 JSON mapping with trace and
span ids in hex and enums as integers. SIGNAL is traces or metrics.

application/x-protobuf: binary protobuf; a field the definitions do not have is an error.
application/json: OTLP JSON, read strictly (json_format.ParseDict with
ignore_unknown_fields=False), and it must be exactly the canonical form of what it
decodes to: lowerCamelCase keys, no field at its default value, 64-bit integers as
strings, enums as numbers, ids as hex of the right length.

Exit 0 when the body decodes, 1 (with the reason on stderr) when it does not. Used by
tests/e2e/test_otel.c; needs Debian's python3-protobuf (scripts/deps.sh)."""
import base64
import json
import os
import sys

sys.path.insert(0, os.environ.get("OTLP_PYTHON_DIR", "."))

from google.protobuf import json_format  # noqa: E402
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2  # noqa: E402
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402

REQUESTS = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
}
# OTLP JSON writes these bytes fields as hex, not base64; their lengths in bytes
IDS = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


def fail(why):
    print("otlp_decode: " + why, file=sys.stderr)
    sys.exit(1)


def ids(value, to_hex):
    """value with every id field converted: hex to base64 (to_hex False) or back."""
    if isinstance(value, list):
        return [ids(v, to_hex) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        if key in IDS and isinstance(v, str):
            if to_hex:
                v = base64.b64decode(v).hex()
            else:
                try:
                    raw = bytes.fromhex(v)
                except ValueError:
                    fail("%s is not hex: %r" % (key, v))
                if len(raw) != IDS[key]:
                    fail("%s has %d bytes, not %d: %r" % (key, len(raw), IDS[key], v))
                v = base64.b64encode(raw).decode()
        out[key] = ids(v, to_hex)
    return out


def canonical(msg):
    return ids(json_format.MessageToDict(msg, use_integers_for_enums=True), True)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in REQUESTS:
        fail("usage: otlp_decode.py traces|metrics CONTENT_TYPE < BODY")
    body = sys.stdin.buffer.read()
    msg = REQUESTS[sys.argv[1]]()
    content_type = sys.argv[2]
    if content_type == "application/x-protobuf":
        try:
            msg.ParseFromString(body)
        except Exception as e:  # DecodeError, whatever the implementation calls it
            fail("not a protobuf %s: %s" % (msg.DESCRIPTOR.name, e))
        size = msg.ByteSize()
        msg.DiscardUnknownFields()
        if msg.ByteSize() != size:
            fail("fields the OTLP definitions do not have")
    elif content_type == "application/json":
        try:
            sent = json.loads(body)
        except ValueError as e:
            fail("not JSON: %s" % e)
        try:
            json_format.ParseDict(ids(sent, False), msg, ignore_unknown_fields=False)
        except json_format.ParseError as e:
            fail("not OTLP JSON of %s: %s" % (msg.DESCRIPTOR.name, e))
        if canonical(msg) != sent:
            fail("not the canonical OTLP JSON of what it decodes to:\n  sent      %s\n"
                 "  canonical %s" % (json.dumps(sent, sort_keys=True),
                                     json.dumps(canonical(msg), sort_keys=True)))
    else:
        fail("Content-Type %r is neither application/x-protobuf nor application/json"
             % content_type)
    json.dump(canonical(msg), sys.stdout)


if __name__ == "__main__":
    main()
