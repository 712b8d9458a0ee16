"""An OTLP/HTTP trace receiver for the tests (issue #13), built on the official protobuf
definitions (PyPI `opentelemetry-proto`): it decodes each ExportTraceServiceRequest the
fabric posts to /v1/traces and appends every span to a JSON-lines file, attributes decoded.

    python receiver.py OUT.jsonl     # prints the port it listens on, then serves
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[1]


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        if self.headers.get("content-type") != "application/x-protobuf":
            self.send_error(415)
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        for rs in request.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    lines.append(json.dumps({
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent": s.parent_span_id.hex(),
                        "name": s.name,
                        "kind": s.kind,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "attributes": attributes(s.attributes),
                        "status": {"code": s.status.code, "message": s.status.message},
                        "resource": resource,
                        "scope": ss.scope.name,
                    }))
        with open(OUT, "a") as f:
            for line in lines:
                f.write(line + "\n")
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
