"""The built site renders in a real headless browser without console errors.

Builds the site with ``mkdocs build --strict`` into a temporary folder, serves it on loopback
and opens the home, API and benchmarks pages in Debian's chromium through playwright. A
screenshot of the home page is kept in ``docs/tests/artefacts/`` (ignored by git). Skipped
where mkdocs, playwright or chromium are missing (``nox -s tests-docs`` installs the first two;
``apt-get install chromium`` the third).
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from conftest import DOCS, ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTEFACTS = DOCS / "tests" / "artefacts"
PAGES = {
    "home": ("", "insitu"),
    "api": ("api/insitu/", "InSituDataset"),
    "benchmarks": ("benchmarks/", "Benchmarks"),
}

pytest.importorskip("mkdocs")
sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")


@pytest.fixture(scope="module")
def site_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    site = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        check=True,
        timeout=240,
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_renders_without_console_errors(site_url: str, page: str) -> None:
    path, expected = PAGES[page]
    problems: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda exc: problems.append(str(exc)))
            tab.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            response = tab.goto(site_url + path, wait_until="networkidle")
            assert response is not None, f"{page}: no response"
            assert response.ok, f"{page}: HTTP {response.status}"
            title = tab.locator("article h1").first.inner_text()
            assert expected in title or expected in tab.locator("article").inner_text()
            assert tab.locator("nav.md-nav").count() > 0, f"{page}: the navigation did not render"
            if page == "home":
                ARTEFACTS.mkdir(exist_ok=True)
                tab.screenshot(path=str(ARTEFACTS / "home.png"), full_page=False)
                # The diagram is an <img> of an SVG in the repository: it must have loaded.
                loaded = tab.eval_on_selector("article img", "img => img.complete && img.naturalWidth > 0")
                assert loaded, "the home page's data-flow diagram did not load"
        finally:
            browser.close()
    assert not problems, f"{page}: {problems}"
