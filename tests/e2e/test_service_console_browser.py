"""The forget service's console in a real browser (Playwright driving Debian's chromium): sign in with a
status:read token, see the served plan, forget through the API, reload, see the new request and plan id.

Needs /usr/bin/chromium (`tools/setup.sh` installs Debian's package as root) and the pinned playwright
wheel; never downloads a browser. Skips with the reason when either is missing (CI has both)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import httpx
import pytest

from fedforget.launch import free_port
from fedforget.service.tokens import create_token

from ..integration.helpers import train_in_process

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def served(tmp_path, monkeypatch):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no browser at {CHROMIUM}: install Debian's chromium (tools/setup.sh does as root)")
    pytest.importorskip("playwright.sync_api", reason="the playwright wheel is not installed (requirements.lock)")
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    store = tmp_path / "store"
    train_in_process(store, 3, method="fedsgt", **{"chains.groups": 3, "chains.budget": 3, "slices-per-client": 2})
    read = create_token(store, "console", ["status:read"])[0]
    write = create_token(store, "crm", ["forget:write"])[0]
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fedforget.unlearning.cli", "serve", "--store", str(store),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                httpx.get(f"{url}/healthz", timeout=5).raise_for_status()
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.time() < deadline, "fedforget serve did not start"
                time.sleep(0.2)
        yield url, store, read, write
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(store, ignore_errors=True)


def test_console_shows_a_forget_made_through_the_api_and_the_new_plan_id(served):
    from playwright.sync_api import sync_playwright

    url, store, read, write = served
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.goto(url + "/")
            assert page.locator("#signin").is_visible()  # no session: the sign-in form, nothing of the store
            page.fill("#token", read)
            page.click("#signin")
            page.wait_for_selector("#plan-id")
            before = page.inner_text("#plan-id")
            assert len(before) == 64 and page.locator("#requests").inner_text() == "no forget requests yet"
            assert page.locator("svg#plot circle").count() == 1  # training's accuracy, 0 forgotten
            sample = __import__("fedforget.store", fromlist=["Store"]).Store.open(store).manifest()[
                "partitions"]["1"][0][0]
            answer = httpx.post(f"{url}/v1/forget-requests", json={"idempotency_key": "browser-1",
                                                                   "samples": [sample]},
                                headers={"Authorization": f"Bearer {write}"}, timeout=120)
            assert answer.status_code == 201, answer.text
            page.reload()
            page.wait_for_selector("#request-1")
            row = page.inner_text("#request-1")
            assert "crm" in row and "purged" in row
            assert page.inner_text("#plan-id") != before
            assert page.locator("svg#plot circle").count() == 2  # a point for the new plan
            with page.expect_download() as download:
                page.click("#request-1 a")
            receipt = download.value.path().read_bytes()
            assert b'"fedforget-receipt/1"' in receipt
        finally:
            browser.close()
