"""Start, watch and stop the test bed's programs.

Each program runs in its own session (so its own process group); stopping sends SIGTERM to the
whole group, waits, then SIGKILLs what is left, so nothing survives. A `ProcessRecord` is the
JSON-serializable identity of a started program (pid + kernel start time, so a recycled pid is
never mistaken for ours); it is what `down` from a fresh process acts on.

`wait_for` is the one way to wait for anything: it polls a check with a deadline, fails fast
when a watched program exits, and raises `StartupError` naming what it waited for together
with the last lines of the watched programs' logs.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")
LOG_TAIL_LINES = 40


class StartupError(RuntimeError):
    """A component did not become ready (or exited); the message carries its log tail."""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces; fields follow the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def start_time_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def memory_kib(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) of ``pid`` in KiB; (0, 0) if it is gone."""
    rss = hwm = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    start_time: int
    log: str
    argv: tuple[str, ...]
    tier: int = 0
    """Shutdown order: lower tiers stop first (clients, then API servers, then etcd)."""

    def alive(self) -> bool:
        fields = _stat_fields(self.pid)
        if fields is None or fields[0] in ("Z", "X"):
            return False
        return int(fields[19]) == self.start_time

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["argv"] = list(self.argv)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProcessRecord:
        return cls(
            name=str(d["name"]),
            pid=int(d["pid"]),
            start_time=int(d["start_time"]),
            log=str(d["log"]),
            argv=tuple(d.get("argv", ())),
            tier=int(d.get("tier", 0)),
        )


def tail(path: Path | str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(data.splitlines()[-lines:])


class Component:
    """One started program with its log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
        tier: int = 0,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log = log
        self.env = dict(env) if env is not None else None
        self.tier = tier
        self._popen: subprocess.Popen[bytes] | None = None
        self.record: ProcessRecord | None = None

    def start(self, append: bool = False) -> Component:
        """Run the program; `append` keeps the log of a previous run (a restart)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        with open(self.log, "ab" if append else "wb") as out:
            out.write(("$ " + " ".join(self.argv) + "\n").encode())
            out.flush()
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env=env,
            )
        pid = self._popen.pid
        self.record = ProcessRecord(
            name=self.name,
            pid=pid,
            start_time=start_time_of(pid) or 0,
            log=str(self.log),
            argv=tuple(self.argv),
            tier=self.tier,
        )
        return self

    @property
    def pid(self) -> int:
        assert self._popen is not None, f"{self.name} was not started"
        return self._popen.pid

    def exit_code(self) -> int | None:
        """None while running (or never started)."""
        return None if self._popen is None else self._popen.poll()

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(self.log, lines)

    def reap(self) -> None:
        if self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=0)

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
        """Signal the program's process group and wait until the program exited (fault tests)."""
        assert self._popen is not None, f"{self.name} was not started"
        _signal_group(self._popen.pid, sig)
        self._popen.wait(timeout)


def _signal_group(pid: int, sig: int) -> None:
    # Each component leads its own session, so its pgid is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop_records(
    records: Iterable[ProcessRecord],
    grace: float = 10.0,
    reap: Callable[[], None] | None = None,
) -> list[str]:
    """SIGTERM every group, wait up to ``grace`` s, SIGKILL the rest; return killed names."""
    live = [r for r in records if r.alive()]
    for r in live:
        _signal_group(r.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    interval = 0.02
    while live and time.monotonic() < deadline:
        if reap:
            reap()
        live = [r for r in live if r.alive()]
        if live:
            time.sleep(interval)
            interval = min(interval * 1.5, 0.25)
    killed = []
    for r in live:
        killed.append(r.name)
        _signal_group(r.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while live and time.monotonic() < deadline:
        if reap:
            reap()
        live = [r for r in live if r.alive()]
        if live:
            time.sleep(0.05)
    return killed


def stop_in_order(
    records: Iterable[ProcessRecord],
    grace: float = 10.0,
    reap: Callable[[], None] | None = None,
) -> list[str]:
    """`stop_records` tier by tier (see `ProcessRecord.tier`).

    Stopping clients first and etcd last lets every server shut down in about a second; with
    everything signalled at once, API servers wait ~10 s for their vanished etcd."""
    tiers: dict[int, list[ProcessRecord]] = {}
    for r in records:
        tiers.setdefault(r.tier, []).append(r)
    killed: list[str] = []
    for tier in sorted(tiers):
        killed += stop_records(tiers[tier], grace, reap)
    return killed


class Supervisor:
    """All components started by this Python process; stops them at exit or on SIGTERM/HUP."""

    def __init__(self, on_start: Callable[[Component], None] | None = None) -> None:
        # Re-entrant: a signal handler may stop everything while the main thread holds it.
        self._lock = threading.RLock()
        self._components: list[Component] = []
        self._cleanup_installed = False
        self._closed = False
        self._on_start = on_start
        self.detached = False

    @property
    def components(self) -> list[Component]:
        with self._lock:
            return list(self._components)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
        tier: int = 0,
    ) -> Component:
        c = Component(name, argv, log, env, tier)
        with self._lock:
            if self._closed:
                raise StartupError(f"not starting {name}: the test bed is stopping")
            self._components.append(c)
            c.start()
        if self._on_start is not None:
            self._on_start(c)
        return c

    def get(self, name: str) -> Component:
        with self._lock:
            for c in self._components:
                if c.name == name:
                    return c
        raise KeyError(f"no component {name!r}; have {[c.name for c in self.components]}")

    def restart(self, name: str, sig: int = signal.SIGKILL) -> Component:
        """Kill component `name` with `sig` and start it again: same argv, ports, data, log."""
        c = self.get(name)
        c.kill(sig)
        with self._lock:
            if self._closed:
                raise StartupError(f"not restarting {name}: the test bed is stopping")
            c.start(append=True)
        if self._on_start is not None:
            self._on_start(c)
        return c

    def detach(self) -> None:
        """Forget the components without stopping them (they outlive this process)."""
        with self._lock:
            self._components.clear()
            self._closed = True
            self.detached = True

    def adopt_exit_handlers(self, cleanup: Callable[[], object] | None = None) -> None:
        """Run ``cleanup`` (default: `stop_all`) at interpreter exit and on SIGTERM/SIGHUP
        (signal handlers only when called from the main thread)."""
        if self._cleanup_installed:
            return
        self._cleanup_installed = True
        stop = cleanup or self.stop_all
        atexit.register(stop)
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous = signal.getsignal(sig)

            def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
                stop()
                if callable(previous):
                    previous(signum, frame)
                    return
                # Then die of the signal as if we had never handled it.
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

            signal.signal(sig, handler)

    def stop_all(self, grace: float = 10.0) -> list[str]:
        """Stop every component, newest first; afterwards nothing more can be started."""
        with self._lock:
            self._closed = True
            components = list(reversed(self._components))
            self._components.clear()
        records = [c.record for c in components if c.record is not None]

        def reap() -> None:
            for c in components:
                c.reap()

        killed = stop_in_order(records, grace, reap)
        reap()
        return killed


def wait_for(
    what: str,
    check: Callable[[], T | None],
    timeout: float,
    watch: Sequence[Component] = (),
) -> T:
    """Poll ``check`` until it returns something truthy; return it.

    Raises `StartupError` when ``timeout`` s pass or a watched component exits first; the
    message names ``what`` and carries the last log lines of the watched components. An
    exception raised by ``check`` counts as "not yet" and is reported on timeout.
    """
    deadline = time.monotonic() + timeout
    interval = 0.05
    last_error: BaseException | None = None
    while True:
        for c in watch:
            code = c.exit_code()
            if code is not None:
                raise StartupError(
                    f"{c.name} exited with code {code} while waiting for {what}; "
                    f"last lines of {c.log}:\n{c.tail()}"
                )
        try:
            result = check()
        except Exception as e:
            last_error = e
            result = None
        if result:
            return result
        if time.monotonic() >= deadline:
            msg = f"timed out after {timeout:.0f}s waiting for {what}"
            if last_error is not None:
                msg += f" (last error: {last_error!r})"
            for c in watch:
                msg += f"\n--- last lines of {c.log} ---\n{c.tail()}"
            raise StartupError(msg)
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.5, 0.5)
