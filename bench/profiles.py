"""Where a process spends its CPU during a storm: karmada-apiserver by its own Go profiler,
our two Python processes by py-spy — each split into a few named shares.

Both profilers sample for a fixed window inside the storm, so a share is a fraction of the
process's busy time in that window; `bench_admission` multiplies it by the process's CPU per
create (from /proc, over the whole storm) to state milliseconds per create per share. A share
is the inclusive time of the frames its pattern names; shares may overlap (an admission webhook
call happens inside a create), which the report says.

Needs `go` (for `go tool pprof`) and `py-spy` on PATH or in the interpreter's bin directory;
without them the profile is skipped with a message, never faked.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from e2e.testbed import TestBed

# karmada-apiserver, by what its handlers serve (pprof regexes, matched against function names)
APISERVER_SHARES: dict[str, str] = {
    "creates (incl. admission)": r"serveResource\.CreateResource",
    "  calls to validating webhooks": r"admission/plugin/webhook/validating",
    "  calls to mutating webhooks": r"admission/plugin/webhook/mutating",
    "status updates (quota writes)": r"serveStatus\.UpdateResource",
    "reads (GET, LIST)": r"serveResource\.(GetResource|ListResource)",
    "watch: decode etcd events, serve watchers": r"etcd3\.\(\*watchChan\)|"
    r"cacher\.\(\*(Cacher|cacheWatcher|watchCache)\)|WatchServer",
    "garbage collector": r"runtime\.gcBgMarkWorker",
}

OTHER = "everything else"

# our processes: each busy sample goes to the first top-level share with a matching frame (in
# this order); an indented share is a part of the one above it
WEBHOOK_SHARES: dict[str, str] = {
    "batch worker (evaluate, reserve, write)": r"^Batcher\._drain$",
    "  quota status writes (encode, HTTP, TLS)": r"^Batcher\._write_quota$",
    "review handler (decode, evaluate, answer)": r"^build_app\.<locals>\.handle$",
    "quota watch (decode, cache)": r"^Informer\.run$",
    "aiohttp request handling around it": r"^(RequestHandler|Application|StreamResponse)\.",
    "TLS and socket I/O": r"^(SSLProtocol|SSLObject|_SelectorSocketTransport)\.",
}
CONTROLLER_SHARES: dict[str, str] = {
    "recompute + status writes (flush)": r"^Controller\.flush$",
    "  status write requests": r"^KubeClient\.request$",
    "watch events: binding index": r"^BindingFeed\.",
    "watch events: quota table": r"^_QuotaFeed\.",
    "watch streams (read, decode)": r"^KubeClient\.watch$",
    "TLS and socket I/O": r"^(SSLProtocol|SSLObject|_SelectorSocketTransport)\.",
}


def _tool(name: str) -> str | None:
    """`name` on PATH, or next to this interpreter (py-spy installed in the venv)."""
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if beside.exists() else None)


def available() -> str | None:
    """None when both profilers can run; else what is missing."""
    missing = [t for t in ("go", "py-spy") if _tool(t) is None]
    return f"profiling skipped: {', '.join(missing)} not found" if missing else None


async def apiserver(bed: TestBed, seconds: int, out: Path) -> Path:
    """karmada-apiserver's CPU profile over the next `seconds` (needs --profiling=true)."""
    argv = [bed.kubectl_binary, f"--kubeconfig={bed.karmada_kubeconfig}", "get", "--raw"]
    return await asyncio.to_thread(
        _run, [*argv, f"/debug/pprof/profile?seconds={seconds}"], out, True
    )


async def python(pid: int, seconds: int, out: Path) -> Path:
    """py-spy samples (collapsed stacks, idle excluded) of a process for `seconds`."""
    spy = _tool("py-spy")
    assert spy is not None
    argv = [spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "250"]
    return await asyncio.to_thread(
        _run, [*argv, "--format", "raw", "--nonblocking", "-o", str(out)], out, False
    )


def _run(argv: list[str], out: Path, from_stdout: bool) -> Path:
    """Run a profiler to its end; `out` holds its profile (its stdout, or the file it wrote)."""
    done = subprocess.run(argv, capture_output=True, timeout=120)
    if done.returncode != 0 or (from_stdout and not done.stdout):
        raise RuntimeError(f"{Path(argv[0]).name} failed: {done.stderr.decode()[:300]}")
    if from_stdout:
        out.write_bytes(done.stdout)
    return out


def pprof_shares(profile: Path, shares: dict[str, str]) -> dict[str, float]:
    """Fraction of the profile's samples under each pattern (inclusive; top-level shares of
    a Go profile may overlap), and under `OTHER` those no top-level pattern claims."""
    go = _tool("go")
    assert go is not None

    def total(focus: str | None) -> float:
        argv = [go, "tool", "pprof", "-raw"] + (["-focus", focus] if focus else []) + [str(profile)]
        text = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        return _raw_samples(text)

    whole = total(None)
    if not whole:
        return dict.fromkeys([*shares, OTHER], 0.0)
    out = {name: total(p) / whole for name, p in shares.items()}
    claimed = total("|".join(f"(?:{p})" for n, p in shares.items() if not n.startswith(" ")))
    return out | {OTHER: 1 - claimed / whole}


def _raw_samples(text: str) -> float:
    """Sum of the cpu values of `pprof -raw` sample lines (`count/nanoseconds: N M`)."""
    body = text.split("Samples:", 1)[-1].split("Locations", 1)[0]
    total = 0.0
    for line in body.splitlines():
        m = re.match(r"\s*(\d+)\s+(\d+):", line)
        if m:
            total += int(m.group(2))
    return total


def spy_shares(samples: Path, shares: dict[str, str]) -> dict[str, float]:
    """Fraction of the busy samples (waiting in `select` excluded) per share; see the order
    rule above `WEBHOOK_SHARES`. Samples no top-level share claims go to `OTHER`."""
    hits: Counter[str] = Counter()
    whole = 0
    patterns = [(name, re.compile(p)) for name, p in shares.items()]
    for line in samples.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if not stack or frames[-1].startswith(("select (selectors.py", "EpollSelector.select")):
            continue
        count = int(n)
        functions = [frame.split(" (", 1)[0] for frame in frames]
        whole += count
        owner = None
        for name, pattern in patterns:
            top = not name.startswith(" ")
            if (top and owner is not None) or (not top and owner is None):
                continue
            if any(pattern.search(f) for f in functions):
                hits[name] += count
                owner = owner or name
        if owner is None:
            hits[OTHER] += count
    return {name: hits[name] / whole if whole else 0.0 for name in [*shares, OTHER]}
