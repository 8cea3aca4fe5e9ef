"""A real OTLP/HTTP trace receiver on loopback, for tests and benchmarks: it decodes what exporters post
to ``/v1/traces`` (protobuf, OpenTelemetry's own ``opentelemetry-proto`` messages) and keeps the spans.

What an OpenTelemetry Collector does first, without the collector: enough to check that spans really
leave a process over OTLP/HTTP (docsumd's exporter, and vLLM's engine processes, which build their
own), not a stand-in for a tracing backend.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as received: ids in hex, its resource's attributes as text."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    resource: dict[str, str] = field(compare=False)


class OtlpSink:
    """Listens on ``127.0.0.1:port`` (a free one) until :meth:`stop`; :attr:`spans` grows as posts come."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                sink.received(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-sink", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """The base URL to configure (``[tracing] otlp_endpoint``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def received(self, request: ExportTraceServiceRequest) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _text(kv.value) for kv in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                spans += [
                    ReceivedSpan(
                        span.name,
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                        resource,
                    )
                    for span in scope.spans
                ]
        with self._lock:
            self.posts += 1
            self.spans.extend(spans)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _text(value: Any) -> str:
    kind = value.WhichOneof("value")
    return "" if kind is None else str(getattr(value, kind))


def main() -> None:
    """Serve in a process of its own (a benchmark keeps the receiver's CPU out of what it measures):
    print the endpoint, serve until stdin closes, then print how many spans came."""
    import sys

    sink = OtlpSink()
    print(sink.endpoint, flush=True)
    sys.stdin.read()
    sink.stop()
    print(len(sink.spans), flush=True)


if __name__ == "__main__":
    main()
