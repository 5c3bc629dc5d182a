"""A real S3 API on loopback (moto's server) and a fault-injecting HTTP proxy in front of it.

The proxy forwards every request to the S3 server unchanged, except those a
test asked it to break: answer with an S3-style error status, reset the
connection, or stall. It counts what it saw, so a test can tell how many
attempts a store made.
"""

from __future__ import annotations

import asyncio
import http.client
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Coroutine
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

T = TypeVar("T")

# Credentials the S3 server accepts (moto does not check them); distinctive, so a test can
# assert they never leak into a message or repr.
ACCESS_KEY = "AKIAINSITUTESTKEY"
SECRET_KEY = "insitu-secret-do-not-print-0123456789"


_loop: asyncio.AbstractEventLoop | None = None


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on one long-lived loop thread, as the engine does (not a loop per call:
    async filesystems keep a client session per loop, which a closed loop cannot release)."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
        threading.Thread(target=_loop.run_forever, name="tests-loop", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coro, _loop).result(timeout=120)


class S3Server:
    """moto's threaded S3 server on 127.0.0.1 at a free port."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self._buckets = 0

    def stop(self) -> None:
        self._server.stop()

    def new_bucket(self, stem: str = "insitu") -> str:
        """Create a fresh bucket (an unsigned PUT: moto needs no credentials)."""
        self._buckets += 1
        name = f"{stem}-{self._buckets:04d}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
        return name

    def icechunk_storage(self, bucket: str, prefix: str = "repo") -> Any:
        """Icechunk storage for a repository under ``prefix`` in ``bucket`` on this server."""
        import icechunk

        return icechunk.s3_storage(
            bucket=bucket,
            prefix=prefix,
            endpoint_url=self.endpoint,
            allow_http=True,
            region="us-east-1",
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            force_path_style=True,
        )

    def make_public(self, bucket: str) -> None:
        """Allow unsigned reads and listings of ``bucket``, as a public dataset's bucket does."""
        import json

        import boto3

        # Read-only wildcards: moto authorises HEAD object as its own action, not as s3:GetObject.
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": "*",
                    "Action": ["s3:Get*", "s3:List*", "s3:Head*"],
                    "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
                }
            ],
        }
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )
        client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))

    def options(self) -> dict[str, Any]:
        """Keyword options that point a store builder at this server with credentials."""
        return {"endpoint": self.endpoint, "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}

    def obstore(self, bucket: str, prefix: str = "") -> Any:
        """A plain obstore S3Store on this server (to write test data, independent of the plugin)."""
        from obstore.store import S3Store

        return S3Store(
            bucket,
            prefix=prefix or None,
            endpoint=self.endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            region="us-east-1",
            client_options={"allow_http": True},
        )

    def zarr_store(self, bucket: str, prefix: str = "") -> Any:
        """A writable plain ``zarr.storage.ObjectStore`` on this server."""
        from zarr.storage import ObjectStore

        return ObjectStore(self.obstore(bucket, prefix), read_only=False)


@dataclass
class Fault:
    """Break the next ``times`` requests whose path contains ``path`` (and method, if given)."""

    path: str
    action: str  # "status:503", "reset" or "delay:2.5"
    times: int = 1_000_000
    method: str | None = None
    hits: int = 0


class _ProxyServer(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: a pass that opens more connections at once than
    # that has the rest wait for a SYN retry (one second), which is no fault a test asked for.
    request_queue_size = 128


@dataclass
class FaultProxy:
    """A loopback HTTP proxy to ``upstream`` that injects :class:`Fault` s."""

    upstream: str
    faults: list[Fault] = field(default_factory=list)
    seen: list[tuple[str, str]] = field(default_factory=list)
    answered: list[tuple[str, str]] = field(default_factory=list)  # responses written in full
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        proxy = self
        up = self.upstream.removeprefix("http://")
        up_host, up_port = up.split(":")

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = proxy._match(self.command, self.path)
                with proxy._lock:
                    proxy.seen.append((self.command, self.path))
                if fault is not None:
                    kind, _, arg = fault.action.partition(":")
                    if kind == "status":
                        return self._error(int(arg))
                    if kind == "reset":
                        # SO_LINGER 0: close() sends a TCP RST, as a dropped connection does.
                        self.connection.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                        self.close_connection = True
                        return None
                    if kind == "delay":
                        time.sleep(float(arg))
                conn = http.client.HTTPConnection(up_host, int(up_port), timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                payload = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                self.wfile.flush()
                with proxy._lock:
                    proxy.answered.append((self.command, self.path))
                conn.close()
                return None

            def _error(self, status: int) -> None:
                code = {403: "AccessDenied", 429: "SlowDown", 503: "SlowDown"}.get(status, "InternalError")
                payload = (
                    f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                    f"<Message>injected {status}</Message></Error>"
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _handle

        self._httpd = _ProxyServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    def _match(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                wanted = fault.path in path and fault.method in (None, method)
                if wanted and fault.hits < fault.times:
                    fault.hits += 1
                    return fault
        return None

    def requests_to(self, path: str) -> int:
        """How many requests whose path contains ``path`` reached the proxy."""
        with self._lock:
            return sum(1 for _, p in self.seen if path in p)

    def answers_to(self, path: str) -> int:
        """How many responses to requests whose path contains ``path`` were written in full."""
        with self._lock:
            return sum(1 for _, p in self.answered if path in p)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class SilentServer:
    """Accepts TCP connections and never answers: an endpoint that hangs every request."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.endpoint = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self._held.append(conn)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for conn in self._held:
            conn.close()
        self._sock.close()


class AuthenticatingS3Server:
    """moto's S3 server in its own process, checking every request's signature (as AWS does).

    moto checks credentials only when ``INITIAL_NO_AUTH_ACTION_COUNT`` is set before it is
    imported, so this server runs apart from the in-process one the other tests share. The
    first requests go unchecked: they create a user allowed everything (``key``/``secret``),
    a user allowed nothing (``denied_key``/``denied_secret``) and ``bucket`` with a group in it.
    """

    # IAM calls made before moto starts checking: 2 users, 1 policy, 2 access keys.
    _UNCHECKED = 5

    def __init__(self) -> None:
        import json
        import os
        import subprocess
        import sys

        import boto3

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(self._UNCHECKED))
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.stop()
                    raise RuntimeError("the authenticating S3 server did not start") from None
                time.sleep(0.1)
        client = {"endpoint_url": self.endpoint, "region_name": "us-east-1"}
        iam = boto3.client("iam", aws_access_key_id="x", aws_secret_access_key="x", **client)
        allow_all = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
        }
        iam.create_user(UserName="reader")
        iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=json.dumps(allow_all))
        iam.create_user(UserName="nobody")
        keys = iam.create_access_key(UserName="reader")["AccessKey"]
        denied = iam.create_access_key(UserName="nobody")["AccessKey"]
        self.key, self.secret = keys["AccessKeyId"], keys["SecretAccessKey"]
        self.denied_key, self.denied_secret = denied["AccessKeyId"], denied["SecretAccessKey"]
        s3 = boto3.client("s3", aws_access_key_id=self.key, aws_secret_access_key=self.secret, **client)
        self.bucket = "insitu-auth"
        s3.create_bucket(Bucket=self.bucket)
        s3.put_object(Bucket=self.bucket, Key="zarr.json", Body=b'{"zarr_format": 3, "node_type": "group"}')

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=30)
