"""Debian's Chromium driven by Playwright (its own browser download is unreachable here), with a fake camera
and a fake microphone that plays a WAV file.
"""

from __future__ import annotations

import contextlib
import shutil
import wave
from pathlib import Path

import numpy as np
from playwright.sync_api import sync_playwright

from tests.harness.speech import RATE

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--autoplay-policy=no-user-gesture-required",
         "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]


def write_wav(path: Path, audio: np.ndarray) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(audio.astype("<i2").tobytes())


@contextlib.contextmanager
def chromium(microphone_wav: Path | None = None, extra_args: list[str] | None = None):
    args = list(FLAGS) + list(extra_args or ())
    if microphone_wav is not None:
        args.append(f"--use-file-for-fake-audio-capture={microphone_wav}%noloop")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def open_page(browser, url: str, enforce_csp: bool = False):
    """A fresh page; page.problems collects console errors and uncaught exceptions (a content security policy
    violation is one). Playwright's wait_for_function evaluates strings in the page, which our policy forbids
    ('unsafe-eval'): pages that must keep the policy (enforce_csp) are waited on with selectors only."""
    context = browser.new_context(ignore_https_errors=True, viewport={"width": 1100, "height": 760},
                                  bypass_csp=not enforce_csp)
    page = context.new_page()
    page.problems = []
    page.on("console", lambda m: m.type == "error" and page.problems.append(m.text))
    page.on("pageerror", lambda e: page.problems.append(str(e)))
    try:
        page.goto(url)
        yield page
    finally:
        context.close()
