"""An OTLP/HTTP receiver for the tests (issue #13), built on the official protobuf
definitions (PyPI `opentelemetry-proto`): it decodes each ExportTraceServiceRequest the
fabric posts to /v1/traces and appends every span to a JSON-lines file, attributes decoded,
and each ExportMetricsServiceRequest posted to /v1/metrics as one line per metric
(`{"metric": name, ...}`).

    python receiver.py OUT.jsonl     # prints the port it listens on, then serves
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
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
        if self.path not in ("/v1/traces", "/v1/metrics"):
            self.send_error(404)
            return
        if self.headers.get("content-type") != "application/x-protobuf":
            self.send_error(415)
            return
        if self.path == "/v1/metrics":
            self.metrics(body)
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
        self.reply(ExportTraceServiceResponse())

    def metrics(self, body):
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        lines = []
        for rm in request.resource_metrics:
            resource = attributes(rm.resource.attributes)
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    data = getattr(m, kind)
                    points = []
                    for p in data.data_points:
                        point = {"attributes": attributes(p.attributes),
                                 "start": p.start_time_unix_nano, "time": p.time_unix_nano}
                        if kind == "histogram":
                            point.update(count=p.count, sum=p.sum,
                                         bucket_counts=list(p.bucket_counts),
                                         explicit_bounds=list(p.explicit_bounds))
                        else:
                            point["value"] = getattr(p, p.WhichOneof("value"))
                        points.append(point)
                    entry = {"metric": m.name, "unit": m.unit, "description": m.description,
                             "kind": kind, "points": points, "resource": resource,
                             "scope": sm.scope.name}
                    if kind in ("sum", "histogram"):
                        entry["temporality"] = data.aggregation_temporality
                    if kind == "sum":
                        entry["monotonic"] = data.is_monotonic
                    lines.append(json.dumps(entry))
        with open(OUT, "a") as f:
            for line in lines:
                f.write(line + "\n")
        self.reply(ExportMetricsServiceResponse())

    def reply(self, response):
        answer = response.SerializeToString()
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
