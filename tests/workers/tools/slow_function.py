"""A function that holds its process's GIL for as long as asked: what a runaway tool does (for test_isolated)."""

import time


def spin(seconds: float) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return "done"


def chatty(text: str) -> str:
    """Prints before it answers, as a library may."""
    print("something printed by the way")
    return text.upper()
