"""The browser helpers of the console's tests: headless Chromium (Debian's package, driven by
Playwright through its executable path), signing in with a token, and moving between pages.
Shared by tests/console/test_browser.py and tests/lab/test_site.py (the console `make site`
deploys); import it with this directory on sys.path (the tests are not packages)."""
import shutil

import pytest


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("Debian's chromium is not installed (make test installs it: DEBIAN_PACKAGES)")
    return path


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        # --no-proxy-server: the console is on this machine (127.0.0.1, or a Service's cluster IP
        # kube-proxy routes here); a proxy from the environment must not take its requests.
        chromium_browser = p.chromium.launch(executable_path=chromium(), headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                                   "--no-proxy-server"])
        yield chromium_browser
        chromium_browser.close()


def signed_in(browser, console, token):
    """A new page of `console` signed in with `token`, and the list its page errors (and any
    Content-Security-Policy refusal) are collected in."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    # The console's Content-Security-Policy must not block anything the pages do.
    page.on("console", lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.goto(console + "/")
    page.fill("#token", token)
    page.click("#login button[type=submit]")
    page.wait_for_selector("#page[data-ready=true]", timeout=20000)
    return page, errors


def go(page, hash_):
    """Navigate to `hash_` (e.g. ``#/policy``) and wait until the page has rendered."""
    page.evaluate("h => { location.hash = h; }", hash_)
    page.wait_for_function("h => location.hash === h && document.querySelector('#page').dataset.ready === 'true'",
                           arg=hash_, timeout=20000)
    no_placeholders(page)


def no_placeholders(page):
    """No JavaScript value leaked into the page as text."""
    text = page.inner_text("#page")
    for word in ("null", "undefined", "NaN", "[object Object]"):
        assert word not in text.split(), f"{word!r} shown on {page.url}"
