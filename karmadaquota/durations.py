"""Go durations (`time.ParseDuration`), as Kubernetes flags and the API server's `?timeout=`
query parameter write them: `90s`, `1h30m`, `1.5s`, `500ms`, `-2m`.

The one parser for every duration the project reads (its flags, the webhook's review budget).
Written here because no dependency of ours reads Go's grammar: a signed sequence of decimal
numbers, each with a unit (ns, us/µs, ms, s, m, h); "0" alone is allowed. Kept to the
microsecond (timedelta's resolution).
"""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse(text: str) -> timedelta:
    """The duration `text` says; ValueError (with the text) when it is not a Go duration."""
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return timedelta(0)
    seconds = 0.0
    at = 0
    while at < len(body):
        m = _PART.match(body, at)
        if m is None:
            break
        seconds += float(m.group(1)) * _UNITS[m.group(2)]
        at = m.end()
    if not body or at != len(body):
        raise ValueError(f"invalid duration {text!r}: use e.g. 30s, 500ms, 5m, 1h30m")
    return timedelta(seconds=-seconds if text.startswith("-") else seconds)


def duration(text: str) -> timedelta:
    """A duration flag (argparse `type=`: 90s, 5m, 1h30m); never negative."""
    try:
        value = parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value < timedelta(0):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must not be negative")
    return value
