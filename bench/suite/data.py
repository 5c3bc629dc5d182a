"""The benchmark's datasets and its loopback S3 server.

Every case is a zarr v3 group of ERA5-like float32 fields (``time, lat, lon``,
coordinates included, zstd) as ``insitu.testing.synthetic.make_era5_like`` writes them.
Simulating the fields costs far more than writing them, so the four-variable
``multivar`` group is generated once and the single-variable cases are copied
out of it with their own chunking (same values, same metadata); ``window``
shares ``c8``'s files (hard links). Built cases are kept under
``WORK/n{samples}/`` with a marker recording how they were built, so a rerun
with the same sample count reuses them.

``S3Server`` runs moto's S3 server in a subprocess on a free loopback port and
uploads cases into bucket ``bench`` under ``<case>.zarr``. ``HTTPServer`` runs
nginx (Debian's ``nginx`` and ``libnginx-mod-http-echo``) on a free loopback
port over the work folder, each request delayed inside the server by
``echo_sleep``: object storage's round trip without a Python wrapper in the
reader's process and without moto's CPU cost.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common import Case, StoreSpec

SHAPE = (181, 360)
SEED = 0
# Bump when the way cases are written changes, so cached data is rebuilt.
DATA_VERSION = 1
BASE = "multivar"

# name -> how the case is laid out (variables, samples per chunk, window, samples per shard).
CASES: dict[str, dict[str, Any]] = {
    "c1": {"variables": ["t2m"], "samples_per_chunk": 1},
    "c2": {"variables": ["t2m"], "samples_per_chunk": 2},
    "c8": {"variables": ["t2m"], "samples_per_chunk": 8},
    "c32": {"variables": ["t2m"], "samples_per_chunk": 32},
    "multivar": {"variables": ["t2m", "u10", "v10", "msl"], "samples_per_chunk": 8},
    "window": {"variables": ["t2m"], "samples_per_chunk": 8, "window": 6},
    "sharded": {"variables": ["t2m"], "samples_per_chunk": 1, "samples_per_shard": 32},
}
COORDS = ("time", "lat", "lon")


def case_for(name: str, root: Path, n_samples: int) -> Case:
    layout = CASES[name]
    return Case(
        name=name,
        root=str(root),
        variables=list(layout["variables"]),
        n_samples=n_samples,
        samples_per_chunk=layout["samples_per_chunk"],
        shape=list(SHAPE),
        window=layout.get("window", 0),
        sharded=bool(layout.get("samples_per_shard")),
        samples_per_shard=layout.get("samples_per_shard", 0),
    )


def build_cases(names: list[str], n_samples: int, work: Path, log: Any = print) -> dict[str, Case]:
    """The named cases with ``n_samples`` samples under ``work``, built where not already cached."""
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise ValueError(f"unknown cases {unknown}; known: {list(CASES)}")
    folder = work / f"n{n_samples}"
    folder.mkdir(parents=True, exist_ok=True)
    cases = {}
    for name in names:
        root = folder / f"{name}.zarr"
        marker = folder / f"{name}.built.json"
        want = {"version": DATA_VERSION, "seed": SEED, "shape": list(SHAPE), "n": n_samples, **CASES[name]}
        if not (marker.exists() and root.exists() and json.loads(marker.read_text()) == want):
            marker.unlink(missing_ok=True)
            source = _source(name, n_samples, folder, log)
            t0 = time.perf_counter()
            _build(name, root, n_samples, source)
            marker.write_text(json.dumps(want))
            log(f"data: built {name} ({n_samples} samples) in {time.perf_counter() - t0:.1f} s: {root}")
        cases[name] = case_for(name, root, n_samples)
    return cases


def _source(name: str, n_samples: int, folder: Path, log: Any) -> Path | None:
    """The built case that ``name`` is derived from (None for the generated base)."""
    if name == BASE:
        return None
    parent = "c8" if name == "window" else BASE
    return Path(build_cases([parent], n_samples, folder.parent, log)[parent].root)


def _build(name: str, root: Path, n_samples: int, source: Path | None) -> None:
    shutil.rmtree(root, ignore_errors=True)
    layout = CASES[name]
    if source is None:
        from insitu.testing.synthetic import make_era5_like

        make_era5_like(
            root,
            n_time=n_samples,
            shape=SHAPE,
            chunks_time=layout["samples_per_chunk"],
            variables=layout["variables"],
            seed=SEED,
        )
    elif name == "window":  # the same files as c8: hard links, no second copy on disk
        shutil.copytree(source, root, copy_function=os.link)
    else:
        _rechunk(
            source, root, layout["variables"], layout["samples_per_chunk"], layout.get("samples_per_shard")
        )


def _rechunk(source: Path, root: Path, variables: list[str], chunk: int, shard: int | None) -> None:
    """Copy ``variables`` and the coordinates of ``source`` into ``root`` with a new time chunking."""
    import zarr

    src = zarr.open_group(source, mode="r")
    dst = zarr.open_group(root, mode="w", zarr_format=3)
    dst.attrs.update(src.attrs.asdict())
    for name in (*COORDS, *variables):
        a = src[name]
        data_var = name in variables
        chunks = (chunk, *a.shape[1:]) if data_var else a.chunks
        shards = (shard, *a.shape[1:]) if data_var and shard else None
        b = dst.create_array(
            name,
            shape=a.shape,
            dtype=a.dtype,
            chunks=chunks,
            shards=shards,
            compressors=a.compressors,
            fill_value=a.fill_value,
            attributes=a.attrs.asdict(),
            dimension_names=a.metadata.dimension_names,
        )
        step = (shards or chunks)[0] * max(1, 256 // (shards or chunks)[0]) if data_var else a.shape[0]
        for start in range(0, a.shape[0], step):
            b[start : start + step] = a[start : start + step]


# --- S3 ---------------------------------------------------------------------------------------

BUCKET = "bench"
CREDENTIALS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench-secret"}


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    """Terminate a server started in its own session (killed if it does not stop in 10 s)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class LoopbackServer:
    """A server subprocess on a free loopback port, a context manager that always stops it."""

    proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LoopbackServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc)

    def launch(self, cmd: list[str], url: str, *, within_s: float, exited: str) -> None:
        """Start ``cmd`` in its own session and wait until ``url`` answers (any HTTP status counts);
        ``exited`` is said if the process dies first, a timeout stops it and says so."""
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {self.proc.returncode} ({exited})")
            try:
                urllib.request.urlopen(url, timeout=1).read()
                return
            except urllib.error.HTTPError:
                return  # it answers (nginx says 403 for a folder without an index)
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{cmd[0]} did not answer at {url} within {within_s:g} s")


NGINX_ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"

NGINX_CONF = """
load_module {module};
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location /delayed/ {{
            echo_sleep {delay_s};
            echo_exec @file;
        }}
        location @file {{
            root {root};
            rewrite ^/delayed/(.*)$ /$1 break;
        }}
        location / {{ root {root}; }}
    }}
}}
"""


class HTTPServer(LoopbackServer):
    """nginx serving ``root`` on a free loopback port; ``/delayed/...`` answers after ``delay_ms``
    (a timer inside the server, so concurrent requests overlap their waits)."""

    def __init__(self, root: Path, delay_ms: float, log: Any = print) -> None:
        self.root = Path(root).resolve()
        self.delay_ms = delay_ms
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""
        self.dir: Path | None = None

    @staticmethod
    def missing() -> str | None:
        """Why nginx cannot serve here (None: it can)."""
        if shutil.which("nginx") is None:
            return "no nginx on PATH (apt-get install nginx libnginx-mod-http-echo)"
        if not Path(NGINX_ECHO_MODULE).exists():
            return f"no {NGINX_ECHO_MODULE} (apt-get install libnginx-mod-http-echo)"
        return None

    def start(self) -> None:
        import tempfile

        port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="insitu-bench-nginx-"))
        conf = self.dir / "nginx.conf"
        conf.write_text(
            NGINX_CONF.format(
                module=NGINX_ECHO_MODULE, dir=self.dir, port=port, delay_s=self.delay_ms / 1e3, root=self.root
            )
        )
        self.base = f"http://127.0.0.1:{port}"
        self.launch(
            ["nginx", "-c", str(conf), "-p", str(self.dir)],
            self.base + "/",
            within_s=30,
            exited=f"see {self.dir}/error.log",
        )
        self.log(f"http: nginx at {self.base}, {self.delay_ms:g} ms per request under /delayed/")

    def stop(self) -> None:
        super().stop()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def store_spec(self, case: Case) -> StoreSpec:
        rel = Path(case.root).resolve().relative_to(self.root).as_posix()
        return StoreSpec(kind="http", latency_ms=0.0, endpoint=f"{self.base}/delayed/{rel}")


class S3Server(LoopbackServer):
    """moto's S3 server in a subprocess on a free loopback port; a context manager that always stops it."""

    def __init__(self, python: str = sys.executable, log: Any = print) -> None:
        self.python = python
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""
        self.uploaded: set[str] = set()

    def start(self) -> None:
        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.launch(
            [self.python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            self.endpoint,
            within_s=60,
            exited="is moto[server] installed?",
        )
        self._client().create_bucket(Bucket=BUCKET)
        self.log(f"s3: moto server at {self.endpoint}, bucket {BUCKET}")

    def _client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", **CREDENTIALS)

    def store_spec(self, case: Case, latency_ms: float = 0.0) -> StoreSpec:
        return StoreSpec(
            kind="s3",
            latency_ms=latency_ms,
            endpoint=self.endpoint,
            bucket=BUCKET,
            prefix=f"{case.name}.zarr",
        )

    def upload(self, case: Case) -> None:
        """Every file of ``case`` under ``<case>.zarr/`` (once per server)."""
        if case.name in self.uploaded:
            return
        t0 = time.perf_counter()
        root = Path(case.root)
        files = sorted(p for p in root.rglob("*") if p.is_file())
        keys = [f"{case.name}.zarr/{p.relative_to(root).as_posix()}" for p in files]
        try:
            import obstore  # noqa: F401
        except ImportError:
            self._upload_boto3(files, keys)
        else:
            asyncio.run(self._upload_obstore(files, keys))
        self.uploaded.add(case.name)
        size = sum(p.stat().st_size for p in files)
        self.log(
            f"s3: uploaded {case.name} ({len(files)} objects, {size / 1e6:.0f} MB) "
            f"in {time.perf_counter() - t0:.1f} s"
        )

    async def _upload_obstore(self, files: list[Path], keys: list[str]) -> None:
        import obstore
        from obstore.store import S3Store

        store = S3Store(
            BUCKET,
            endpoint=self.endpoint,
            region="us-east-1",
            access_key_id=CREDENTIALS["aws_access_key_id"],
            secret_access_key=CREDENTIALS["aws_secret_access_key"],
            client_options={"allow_http": True},
        )
        limit = asyncio.Semaphore(16)

        async def put(path: Path, key: str) -> None:
            async with limit:
                await obstore.put_async(store, key, path.read_bytes())

        await asyncio.gather(*(put(p, k) for p, k in zip(files, keys, strict=True)))

    def _upload_boto3(self, files: list[Path], keys: list[str]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        client = self._client()
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda pk: client.upload_file(str(pk[0]), BUCKET, pk[1]), zip(files, keys, strict=True)
                )
            )
