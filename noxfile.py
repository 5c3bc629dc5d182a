"""Sessions for the insitu monorepo: one isolated virtualenv per package / framework.

`nox -l` lists them; `nox -t tests` runs every test session; `nox -s tests-torch -- -k loss`
passes arguments after `--` to pytest (or to the script, for demo and bench).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox

# A missing interpreter (python3.12 on a machine without it) skips that session instead of
# failing it, CI included (nox errors on missing interpreters by default when CI is set).
nox.options.error_on_missing_interpreters = False
# Sessions run offline-capable: never fetch an interpreter from the network.
nox.options.download_python = "never"
# Framework wheels are large (torch, tensorflow-cpu, jax): reinstalling them on every run costs
# minutes. Local packages are installed editable, so reused venvs still see source changes.
# `nox --reuse-venv=no` forces fresh environments.
nox.options.reuse_venv = "yes"

ROOT = Path(__file__).parent

# Pinned so lint and type results only change when we bump them.
RUFF = "ruff==0.17.6"
MYPY = "mypy==2.4.1"
# Layer, cycle and forbidden-import contracts ([tool.importlinter] in the root pyproject.toml).
IMPORT_LINTER = "import-linter==2.17"
# pip (not uv) installs torch: with the machine's pip configuration it takes the local CPU wheel,
# where uv would resolve the multi-GB CUDA build from the index.
TORCH = "torch==2.13.0"
# tensorflow-cpu rather than tensorflow: no CUDA runtime to download, same API.
TENSORFLOW = "tensorflow-cpu>=2.16"

# A hung test fails after 5 minutes instead of eating the CI budget.
PYTEST_ARGS = ("-p", "no:cacheprovider", "--timeout=300")
# Sessions whose tests are independent run them in worker processes (pytest-xdist), one per core
# (at most 4, so a large machine does not start a store server per core). A test file stays on
# one worker (loadfile): its module fixtures are built once and its tests keep their order.
# Process-wide state (the engine loop, the plugin registry, thread counts) is per worker; every
# server a test starts takes a free port. `-- -n 0` runs a session in one process.
PARALLEL = ("-n", "auto", "--maxprocesses=4", "--dist=loadfile")
# The slow core cases (`@pytest.mark.slow`: the soak, the fault drills over many seeds, the
# scripts run in subprocesses) check the engine, not the interpreter: they run once, on the
# first Python of tests-core; the other Pythons run everything else.
NOT_SLOW = ("-m", "not slow")
IMPORT_NAMES = {
    "insitu-core": "insitu",
    "insitu-stores": "insitu_stores",
    "insitu-transforms": "insitu_transforms",
    "insitu-torch": "insitu_torch",
    "insitu-jax": "insitu_jax",
    "insitu-tf": "insitu_tf",
    "insitu-gpu": "insitu_gpu",
}


def _editable(*specs: str) -> list[str]:
    """`-e` arguments for local packages, e.g. `insitu-torch[test]`."""
    args: list[str] = []
    for spec in specs:
        args += ["-e", f"packages/{spec}"]
    return args


def _pytest(session: nox.Session, package: str, *extra: str) -> None:
    """Run one package's tests from the repo root (root pyproject.toml holds the pytest config);
    ``extra`` (e.g. :data:`PARALLEL`) goes before the caller's arguments, which may override it."""
    # Exit code 5 (no tests collected) is legitimate only when the caller narrowed the selection
    # (`nox -t tests -- -k name` matches tests in one package, none in the others). Without
    # arguments, a package that collects nothing is a broken package and must fail.
    success_codes = [0, 5] if session.posargs else [0]
    # Paths among the arguments replace the package's test folder (`-- path/to/test_x.py`).
    given_paths = [arg for arg in session.posargs if not arg.startswith("-") and Path(arg).exists()]
    targets = [] if given_paths else [f"packages/{package}/tests"]
    session.run("pytest", *targets, *PYTEST_ARGS, *extra, *session.posargs, success_codes=success_codes)


CORE_PYTHONS = ["3.11", "3.12"]


@nox.session(name="tests-core", python=CORE_PYTHONS, venv_backend="uv", tags=["tests"])
def tests_core(session: nox.Session) -> None:
    """insitu-core (numpy, zarr, pluggy only) on every supported Python found on this machine."""
    session.install(*_editable("insitu-core[test]"))
    once = () if session.python == CORE_PYTHONS[0] else NOT_SLOW
    _pytest(session, "insitu-core", *PARALLEL, *once)


@nox.session(name="tests-stores", python=["3.11", "3.12"], venv_backend="uv", tags=["tests"])
def tests_stores(session: nox.Session) -> None:
    """insitu-stores: obstore, fsspec, Icechunk, Arraylake, virtual FITS/HDF5, against a loopback S3 server."""
    # The test extra holds every backend and the S3 server (moto); the Python decides the
    # versions (icechunk 1.x / virtualizarr 2.5 on 3.11, icechunk 2.x / virtualizarr 2.8 on 3.12).
    session.install(*_editable("insitu-core[test]", "insitu-stores[test]"))
    _pytest(session, "insitu-stores", *PARALLEL)


@nox.session(name="tests-transforms", python="3.11", venv_backend="uv", tags=["tests"])
def tests_transforms(session: nox.Session) -> None:
    """insitu-transforms: StandardScaler and chunk transforms."""
    session.install(*_editable("insitu-core[test]", "insitu-transforms[test]"))
    # One process: 250 tests in about 20 s, and two workers measured slower (their start-up).
    _pytest(session, "insitu-transforms")


@nox.session(name="tests-torch", python="3.11", venv_backend="venv", tags=["tests"])
def tests_torch(session: nox.Session) -> None:
    """insitu-torch against the CPU torch wheel (plain venv + pip, see TORCH)."""
    # torchdata in the same pip call, so its `torch>=2` resolves to the pinned CPU wheel; the
    # resume tests also run through its StatefulDataLoader (0.11.0 checked with torch 2.13.0).
    session.install(TORCH, "torchdata==0.11.0")
    session.install(*_editable("insitu-core[test]", "insitu-torch[test]"))
    _pytest(session, "insitu-torch", *PARALLEL)


@nox.session(name="tests-jax", python="3.11", venv_backend="uv", tags=["tests"])
def tests_jax(session: nox.Session) -> None:
    """insitu-jax on CPU jax, including a two-process jax.distributed run on loopback."""
    session.env["JAX_PLATFORMS"] = "cpu"  # skip the accelerator probe and its warnings
    session.install(*_editable("insitu-core[test]", "insitu-jax[jax,test]"))
    _pytest(session, "insitu-jax")


@nox.session(name="tests-tf", python="3.11", venv_backend="uv", tags=["tests"])
def tests_tf(session: nox.Session) -> None:
    """insitu-tf on tensorflow-cpu, including MirroredStrategy over two logical CPU devices."""
    session.env["TF_CPP_MIN_LOG_LEVEL"] = "2"  # keep C++ start-up chatter out of test logs
    session.install(TENSORFLOW)
    session.install(*_editable("insitu-core[test]", "insitu-tf[test]"))
    _pytest(session, "insitu-tf")


@nox.session(name="tests-gpu", python="3.11", venv_backend="uv", tags=["tests"])
def tests_gpu(session: nox.Session) -> None:
    """insitu-gpu's device stage on the numpy backend (ring, ordering, device transforms vs host, resume); GPU tests skip without a device."""
    # insitu-transforms: the device transforms are checked against its host implementations.
    session.install(*_editable("insitu-core[test]", "insitu-transforms", "insitu-gpu[test]"))
    _pytest(session, "insitu-gpu")


@nox.session(name="tests-bench", python="3.11", venv_backend="uv", tags=["tests"])
def tests_bench(session: nox.Session) -> None:
    """The benchmark scripts' own tests (bench/tests): tiny runs of each script, the regression guard's arithmetic."""
    # matplotlib: the report's plots are drawn in the tests too.
    session.install(*_editable("insitu-core[test]", "insitu-transforms[test]"), "psutil", "matplotlib")
    success_codes = [0, 5] if session.posargs else [0]
    session.run(
        "pytest", "bench/tests", *PYTEST_ARGS, *PARALLEL, *session.posargs, success_codes=success_codes
    )


@nox.session(python="3.11", venv_backend="uv")
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and the import contracts (core's floors, no cycles, no framework in core)."""
    session.install(RUFF, IMPORT_LINTER)
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", ".")
    # The contracts live in the root pyproject.toml. import-linter reads the import statements of
    # each package's src without importing it, so the packages need not be installed here.
    src = [str(ROOT / "packages" / name / "src") for name in IMPORT_NAMES]
    session.run("lint-imports", env={"PYTHONPATH": os.pathsep.join(src)})


@nox.session(python="3.11", venv_backend="uv")
def types(session: nox.Session) -> None:
    """mypy (config in the root pyproject.toml) on every package's src and the examples."""
    # Plugins without their frameworks: mypy sees torch/jax/tf as Any (see the root config).
    extras = {"insitu-core": "[test]", "insitu-stores": "[fsspec]"}
    session.install(MYPY, *_editable(*(name + extras.get(name, "") for name in IMPORT_NAMES)))
    packages = [arg for name in IMPORT_NAMES.values() for arg in ("-p", name)]
    session.run("mypy", *packages, *session.posargs)
    session.run("mypy", "examples", *session.posargs)


# The documentation site's tools, pinned so a build only changes when we bump them.
DOCS_TOOLS = (
    "mkdocs==1.6.1",
    "mkdocs-material==9.8.2",
    "mkdocstrings==1.0.8",
    "mkdocstrings-python==2.0.11",
    "pymdown-extensions==13.1.2",
)
# Drives Debian's chromium (never downloads a browser) for the rendering check in docs/tests.
PLAYWRIGHT = "playwright==1.65.2"


@nox.session(python="3.11", venv_backend="uv")
def docs(session: nox.Session) -> None:
    """Build the documentation site with --strict (broken links, missing references fail); output in site/."""
    # mkdocstrings reads the packages' sources (paths in mkdocs.yml): nothing of insitu is installed.
    session.install(*DOCS_TOOLS)
    session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session(name="tests-docs", python="3.11", venv_backend="uv", tags=["tests"])
def tests_docs(session: nox.Session) -> None:
    """The docs' own tests: API and hook coverage, every runnable snippet, the example plugin, headless chromium."""
    session.install(*DOCS_TOOLS, PLAYWRIGHT, "pip", "hatchling>=1.27")
    session.install(*_editable("insitu-core[test]", "insitu-transforms"))
    success_codes = [0, 5] if session.posargs else [0]
    session.run("pytest", "docs/tests", *PYTEST_ARGS, *session.posargs, success_codes=success_codes)


@nox.session(python="3.11", venv_backend="uv")
def demo(session: nox.Session) -> None:
    """Build a synthetic ERA5-like store and train a small model on it in place (numpy)."""
    session.install(*_editable("insitu-core"))
    session.run("python", "examples/train_era5.py", "--framework", "numpy", *session.posargs)


@nox.session(name="demo-torch", python="3.11", venv_backend="venv", default=False)
def demo_torch(session: nox.Session) -> None:
    """The demo, training through insitu-torch and a torch DataLoader."""
    session.install(TORCH)
    session.install(*_editable("insitu-core", "insitu-torch"))
    session.run("python", "examples/train_era5.py", "--framework", "torch", *session.posargs)


# Every example, by the framework environment it runs in (frameworks never share a virtualenv).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "torch": (
        "examples.advection.train_torch",
        "examples.microscopy",
        "examples.hubble",
        "examples.sdss",
        "examples.wb2_dataloader",
        "examples.wb2_pair",
    ),
    "jax": ("examples.advection.train_jax",),
    "tf": ("examples.advection.train_tf",),
}
# What the examples need besides insitu: xarray-written stores, FITS, the xbatcher peer, memory probes.
EXAMPLE_EXTRAS = (
    "xarray>=2024.10",
    "dask>=2024.8",
    "xbatcher>=0.4",
    "psutil>=5.9",
    "pytest>=8",
    "pytest-timeout>=2.3",
    "pytest-xdist>=3.6.1",  # tests-examples runs in worker processes (PARALLEL)
)


def _example_env(session: nox.Session, framework: str) -> None:
    """One framework's example environment: the framework, insitu with its adapter, and the extras."""
    common = ("insitu-core", "insitu-stores[virtual,fsspec]", "insitu-transforms")
    if framework == "torch":
        session.install(TORCH)
        session.install(*_editable(*common, "insitu-torch"), *EXAMPLE_EXTRAS)
    elif framework == "jax":
        session.env["JAX_PLATFORMS"] = "cpu"
        session.install(*_editable(*common, "insitu-jax[jax]"), *EXAMPLE_EXTRAS)
    else:
        session.env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        session.install(TENSORFLOW)
        session.install(*_editable(*common, "insitu-tf"), *EXAMPLE_EXTRAS)


@nox.session(python="3.11", venv_backend="venv", tags=["tests", "examples"])
@nox.parametrize("framework", list(EXAMPLES))
def examples(session: nox.Session, framework: str) -> None:
    """Every example of one framework in synthetic smoke mode; each must beat its baseline."""
    _example_env(session, framework)
    for module in EXAMPLES[framework]:
        session.run("python", "-m", module, "--smoke", *session.posargs)


@nox.session(name="tests-examples", python="3.11", venv_backend="venv", tags=["tests"])
def tests_examples(session: nox.Session) -> None:
    """The examples' data paths (synthetic and real-store layouts) against local copies of the real stores."""
    _example_env(session, "torch")
    success_codes = [0, 5] if session.posargs else [0]
    session.run(
        "pytest", "examples/tests", *PYTEST_ARGS, *PARALLEL, *session.posargs, success_codes=success_codes
    )


# The published reference design the benchmark compares against: Python >= 3.12 only, so it gets
# its own virtualenv (built once with uv, kept under .nox/ and reused).
INSITUBATCH = "insitubatch==0.2.0"
INSITUBATCH_VENV = ROOT / ".nox" / "bench-insitubatch-py312"


def _python312() -> str | None:
    """A working Python 3.12: ``python3.12`` on PATH, else pyenv's 3.12 when pyenv has one but it is not active."""
    found = shutil.which("python3.12")
    if found and subprocess.run([found, "--version"], capture_output=True).returncode == 0:
        return found
    try:
        pyenv_root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    candidates = sorted(Path(pyenv_root.strip(), "versions").glob("3.12*/bin/python3.12"))
    return str(candidates[-1]) if candidates else None


def _uv() -> str | None:
    """The uv executable: on PATH, next to nox's interpreter, or from the uv package nox was installed with."""
    found = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if found:
        return found
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found]
    except ImportError:
        return None
    return str(find_uv_bin())


def _py312_venv(
    session: nox.Session, venv: Path, engine: str, packages: tuple[str, ...], imports: str
) -> str | None:
    """The python of a 3.12 virtualenv holding ``packages``, created on first use (reused while
    ``imports`` import there); None, with a note that ``engine`` is skipped, when impossible."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", f"import {imports}"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return str(python)
    py312, uv = _python312(), _uv()
    if py312 is None or uv is None:
        session.warn(
            f"bench: no {'python3.12' if py312 is None else 'uv'} on this machine; {engine} is skipped"
        )
        return None
    session.run_install(uv, "venv", "--clear", "-p", py312, str(venv), external=True)
    session.run_install(uv, "pip", "install", "--python", str(python), *packages, external=True)
    return str(python)


def _insitubatch_python(session: nox.Session) -> str | None:
    """The 3.12 interpreter with insitubatch."""
    packages = (INSITUBATCH, "obstore", "psutil")
    return _py312_venv(session, INSITUBATCH_VENV, "insitubatch", packages, "insitubatch, obstore, psutil")


# tensorstore, the C++ reference engine (zarr3 driver): its own 3.12 virtualenv too, so its wheels
# never pin the numpy the insitu engines are measured with.
TENSORSTORE_VENV = ROOT / ".nox" / "bench-tensorstore-py312"


def _tensorstore_python(session: nox.Session) -> str | None:
    """The 3.12 interpreter with tensorstore (zarr too: the suite's common module imports it under
    every interpreter, for its latency wrappers)."""
    packages = ("tensorstore", "zarr", "psutil")
    return _py312_venv(session, TENSORSTORE_VENV, "tensorstore", packages, "tensorstore, zarr, psutil")


def _bench_env(session: nox.Session) -> list[str]:
    """The benchmark environment; returns the ``--insitubatch-python`` and ``--tensorstore-python``
    arguments (none without 3.12)."""
    # pip (not uv) for torch: see TORCH. xbatcher in the same call keeps torch at the pinned wheel.
    session.install(TORCH, "xarray", "xbatcher")
    session.install(*_editable("insitu-core", "insitu-stores"), "psutil", "matplotlib", "moto[server]")
    extra = []
    for flag, make in (
        ("--insitubatch-python", _insitubatch_python),
        ("--tensorstore-python", _tensorstore_python),
    ):
        if flag in session.posargs:
            continue
        python = make(session)
        if python is not None:
            extra += [flag, python]
    return extra


@nox.session(python="3.11", venv_backend="venv", default=False)
def bench(session: nox.Session) -> None:
    """insitu beside its peers (insitubatch, xbatcher, torch DataLoader stacks) and the machine's ceilings.

    Quick mode by default (minutes on two cores); `nox -s bench -- --mode full --docs` runs the full
    grid and rewrites docs/benchmarks.md. Arguments after `--` go to bench/run.py; results go to
    bench/results/ unless `--out` says otherwise. The http condition needs nginx with its echo
    module (Debian: nginx libnginx-mod-http-echo) and is skipped with a note without them.
    """
    extra = _bench_env(session)
    session.run("python", "bench/run.py", *session.posargs, *extra)


@nox.session(name="bench-smoke", python="3.11", venv_backend="venv", default=False)
def bench_smoke(session: nox.Session) -> None:
    """A few minutes of the suite; fails when a ratio (vs insitubatch, vs the decode ceiling) drops >20% below bench/baseline.json."""
    extra = _bench_env(session)
    session.run("python", "bench/smoke.py", *session.posargs, *extra)
