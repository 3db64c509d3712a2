"""Progress output: every step is named, with the time since the test bed started."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class Reporter:
    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.t0 = time.monotonic()
        self._stream = stream
        self._quiet = quiet
        self._lock = threading.Lock()
        self.steps: dict[str, float] = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def step(self, scope: str, message: str) -> None:
        t = self.elapsed()
        with self._lock:
            self.steps[f"{scope}: {message}"] = round(t, 2)
            if not self._quiet:
                stream = self._stream or sys.stderr
                print(f"[testbed {t:6.1f}s] {scope:<8} {message}", file=stream, flush=True)
