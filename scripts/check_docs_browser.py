"""Open the built documentation site in headless Chromium and check it as a reader would.

    python scripts/check_docs_browser.py [SITE] [--shots DIR] [--shot PATH ...] [--search WORD]

- serves SITE (default ``site/``) over HTTP on 127.0.0.1, from a thread of this process;
- drives Debian's ``/usr/bin/chromium`` through Playwright (never ``playwright install``: no browser
  is downloaded, and a missing chromium is an error that says how to install it);
- from the home page, clicks through the navigation (the tabs, the left sidebar, collapsed sections
  opened as a reader would) until no new page turns up: every page of the built site must be reached
  by a click, load with HTTP 200, have a title, and raise no console error and no uncaught exception;
- no request may leave 127.0.0.1 (it is aborted and reported): the site must work offline;
- every same-origin link on every page reached must answer 200 (the JSON Schemas included);
- the search box must find WORD (the search index and its worker load);
- full-page screenshots of the home page and of each ``--shot`` page go to DIR.

Exit 0 when everything holds, 1 with one ``PROBLEM`` line per finding, 2 when it cannot run.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urlparse

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--no-sandbox",  # as root in a container the sandbox cannot start (Playwright adds it anyway)
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--mute-audio",
)
# Material for MkDocs' elements, in one place.
NAV_LINKS = ".md-sidebar--primary a.md-nav__link[href], .md-tabs a[href]"
SECTION_LABELS = ".md-sidebar--primary label.md-nav__link[for]"
SEARCH_INPUT = "input.md-search__input"
SEARCH_RESULT = ".md-search-result__item"
TIMEOUT_MS = 120_000  # a busy 2-core CI machine can take tens of seconds for one page
LOCAL_HOST = "127.0.0.1"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Keep stdout for the report."""


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that drops a connection it no longer needs is not a problem of the site."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(root))
    httpd = _Server((LOCAL_HOST, 0), handler)
    threading.Thread(target=httpd.serve_forever, name="docs-http", daemon=True).start()
    return httpd, f"http://{LOCAL_HOST}:{httpd.server_address[1]}"


def site_pages(root: Path) -> set[str]:
    """The URL path of every page of the built site ('/', '/guides/kafka/', ...), 404 excluded."""
    pages = set()
    for index in root.rglob("index.html"):
        relative = index.parent.relative_to(root).as_posix()
        pages.add("/" if relative == "." else f"/{relative}/")
    return pages


def url_path(url: str) -> str:
    """A page's URL as a path without its fragment or a trailing index.html."""
    path = urlparse(urldefrag(url)[0]).path or "/"
    return path.removesuffix("index.html")


class Check:
    """One browser session over the site: what it reached, what it clicked, what went wrong."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.base = base
        self.current = "/"
        self.problems: list[str] = []
        self.external: list[str] = []
        self.reached: set[str] = set()
        self.clicked: set[str] = set()
        self.links: set[str] = set()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problem(f"JS exception: {error}"))
        page.on("requestfailed", self._request_failed)
        page.on("response", self._response)

    def problem(self, text: str) -> None:
        self.problems.append(f"{self.current}: {text}")

    def route(self, route: Any) -> None:
        """Let requests to this machine through; abort and report any other."""
        url = route.request.url
        if urlparse(url).hostname == LOCAL_HOST or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            self.external.append(f"{self.current}: {url}")
            route.abort()

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.problem(f"console error: {message.text}")

    def _response(self, response: Any) -> None:
        if response.status >= 400:
            self.problem(f"HTTP {response.status}: {response.url}")

    def _request_failed(self, request: Any) -> None:
        if urlparse(request.url).hostname == LOCAL_HOST:
            self.problem(f"request failed: {request.url} {request.failure}")

    def load(self, path: str) -> None:
        self.current = path
        response = self.page.goto(self.base + path, wait_until="networkidle")
        if response is None or response.status != 200:
            self.problem(f"status {response and response.status}")

    def nav_targets(self) -> list[str]:
        hrefs = self.page.eval_on_selector_all(NAV_LINKS, "els => els.map(e => e.href)")
        site = urlparse(self.base).netloc
        return [url_path(h) for h in hrefs if urlparse(h).netloc == site]

    def click_to(self, target: str) -> bool:
        """Click a visible, unobstructed navigation link to ``target``; wait for the page."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        for link in self.page.locator(NAV_LINKS).all():
            if url_path(link.evaluate("e => e.href")) != target or not link.is_visible():
                continue
            try:
                link.click(trial=True, timeout=3_000)  # would a click reach it (not covered)?
            except PlaywrightTimeout:
                continue
            link.click()
            self.page.wait_for_url(self.base + target)
            self.page.wait_for_load_state("networkidle")
            return True
        return False

    def expand_sections(self) -> bool:
        """Open the collapsed sections of the sidebar that a reader can click, nesting included."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        opened = False
        for _ in range(10):
            closed = [
                label
                for label in self.page.locator(SECTION_LABELS).all()
                if label.is_visible()
                and not self.page.locator(f"input#{label.get_attribute('for')}").is_checked()
            ]
            progress = False
            for label in closed:
                try:
                    label.click(trial=True, timeout=3_000)  # top-level section titles are not clickable
                except PlaywrightTimeout:
                    continue
                label.click()
                progress = opened = True
            if not progress:
                break
        return opened

    def note_links(self) -> None:
        """Remember the page's links into the site (not other ports of this machine, e.g. /metrics)."""
        site = urlparse(self.base).netloc
        hrefs = self.page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
        self.links |= {urldefrag(h)[0] for h in hrefs if urlparse(h).netloc == site}

    def walk(self) -> None:
        """From the home page, click through the navigation until no new page turns up."""
        self.load("/")
        self.reached.add("/")
        queue: list[str] = []
        while True:
            self.note_links()
            queue += [t for t in self.nav_targets() if t not in self.reached and t not in queue]
            if not queue:
                return
            target = queue.pop(0)
            self.current = target
            if self.click_to(target) or (self.expand_sections() and self.click_to(target)):
                self.clicked.add(target)
            else:
                self.problem("no navigation link leads here by a click; opened by its URL")
                self.load(target)
            if url_path(self.page.url) != target:
                self.problem(f"its link landed on {url_path(self.page.url)}")
            if not self.page.locator("article h1").count():
                self.problem("no title (h1) in the article")
            self.reached.add(target)

    def search(self, word: str) -> None:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        self.load("/")
        self.current = f"search {word!r}"
        self.page.locator(SEARCH_INPUT).click()
        self.page.keyboard.type(word)
        try:
            self.page.locator(SEARCH_RESULT).first.wait_for(timeout=60_000)
        except PlaywrightTimeout:
            self.problem("no result")

    def screenshot(self, path: str, shots: Path) -> Path:
        self.load(path)
        out = shots / f"{path.strip('/').replace('/', '_') or 'home'}.png"
        self.page.screenshot(path=str(out), full_page=True)
        return out


def check_links(links: set[str]) -> list[str]:
    """Every link fetched once, without a proxy: each must answer 200."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    problems = []
    for url in sorted(links):
        try:
            opener.open(url, timeout=30).close()
        except (urllib.error.URLError, OSError) as exc:
            problems.append(f"link {url}: {exc}")
    return problems


def run(site: Path, shots: Path, shot_paths: list[str], word: str, chromium: str) -> int:
    from playwright.sync_api import sync_playwright

    shots.mkdir(parents=True, exist_ok=True)
    httpd, base = _serve(site)
    say: Callable[[str], None] = print
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            check = Check(page, base)
            context.route("**/*", check.route)
            check.walk()
            for missing in sorted(site_pages(site) - check.reached):
                check.problems.append(f"{missing}: a built page the navigation does not reach")
            if word:
                check.search(word)
            written = [check.screenshot(path, shots) for path in ["/", *shot_paths]]
            browser.close()
        problems = check.problems + check_links(check.links)
    finally:
        httpd.shutdown()
        httpd.server_close()
    problems += [f"request to another host (aborted): {url}" for url in check.external]
    say(
        f"pages: {len(site_pages(site))} built, {len(check.reached)} reached "
        f"({len(check.clicked)} by a click from the home page); links checked: {len(check.links)}; "
        f"screenshots: {', '.join(str(p) for p in written)}"
    )
    for line in problems:
        say(f"PROBLEM {line}")
    say("OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("site", type=Path, nargs="?", default=Path("site"), help="the built site")
    parser.add_argument("--shots", type=Path, default=Path("site-shots"), help="where screenshots go")
    parser.add_argument("--shot", action="append", default=[], metavar="PATH", help="another page to capture")
    parser.add_argument("--search", default="", metavar="WORD", help="a word the search must find")
    parser.add_argument("--chromium", default=CHROMIUM, help="the browser (default: %(default)s)")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"no built site in {args.site}: run `bash scripts/docs.sh` first", file=sys.stderr)
        return 2
    if shutil.which(args.chromium) is None:
        print(
            f"no browser at {args.chromium}: install Debian's package (apt-get install chromium); "
            "this check never downloads one",
            file=sys.stderr,
        )
        return 2
    return run(args.site.resolve(), args.shots, args.shot, args.search, args.chromium)


if __name__ == "__main__":
    sys.exit(main())
