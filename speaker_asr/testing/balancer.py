"""A loopback load balancer: one URL in front of several server processes, as an Inference
Endpoint's proxy puts one URL in front of its replicas. For measuring the batch client against 1,
2, ... replicas on one machine (bench/batch_throughput.py) and for tests.

Each request goes, whole, to the backend with the fewest requests in flight (ties in turn), and
its answer comes back as the backend gave it (status, headers, body); a backend that cannot be
reached answers 502, as a proxy does. Threads, the standard library and ``requests``; loopback
only, no TLS, no streaming (bodies are buffered: audio files of a few MB).

    with Balancer(["http://127.0.0.1:8081", "http://127.0.0.1:8082"]) as lb:
        ... RemoteEngine(lb.url, concurrency=4) ...
        print(lb.served)   # requests answered by each backend
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Sequence

# headers that belong to one connection, not to the message (RFC 9110 section 7.6.1)
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "content-length", "host"}


class Balancer:
    """``url``: where it listens (127.0.0.1, a free port). ``served[i]``: requests backend i answered."""

    def __init__(self, backends: Sequence[str], timeout_s: float = 3600.0):
        if not backends:
            raise ValueError("a balancer needs at least one backend URL")
        self.backends = [b.rstrip("/") for b in backends]
        self.timeout_s = timeout_s
        self.in_flight = [0] * len(self.backends)
        self.served = [0] * len(self.backends)
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._local = threading.local()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                outer._forward(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="balancer")
        self._thread.start()

    def _pick(self) -> int:
        with self._lock:
            fewest = min(self.in_flight)
            candidates = [i for i, n in enumerate(self.in_flight) if n == fewest]
            choice = candidates[next(self._turn) % len(candidates)]
            self.in_flight[choice] += 1
            return choice

    def _session(self):
        session = getattr(self._local, "session", None)
        if session is None:
            import requests

            session = requests.Session()
            session.trust_env = False  # loopback: never through a proxy
            self._local.session = session
        return session

    def _forward(self, request: BaseHTTPRequestHandler) -> None:
        import requests

        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        i = self._pick()
        try:
            r = self._session().request(request.command, self.backends[i] + request.path, data=body,
                                        headers=headers, timeout=(10, self.timeout_s), allow_redirects=False)
            status, reason, out_headers, data = r.status_code, r.reason, r.headers.items(), r.content
            with self._lock:
                self.served[i] += 1
        except requests.RequestException as exc:
            status, reason = 502, "Bad Gateway"
            data = json.dumps({"error": f"backend {i} unreachable ({type(exc).__name__})"}).encode()
            out_headers = [("Content-Type", "application/json")]
        finally:
            with self._lock:
                self.in_flight[i] -= 1
        request.send_response(status, reason)
        for key, value in out_headers:
            if key.lower() not in HOP_BY_HOP and key.lower() not in ("server", "date", "content-encoding"):
                request.send_header(key, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(data)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "Balancer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
