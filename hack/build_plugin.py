"""Bundle the kubectl plugin (`kubectl karmadaquota`) without the server stack.

    hack/build-plugin.sh [--out DIR]
        for this machine and this interpreter, from the packages installed in it (offline)
    hack/build-plugin.sh [--out DIR] --target linux/amd64 --python 3.11 --python 3.12 ...
        for another os/arch and each listed CPython; pydantic-core's wheels are fetched with
        `pip download` (network), everything else comes from this interpreter

Writes DIR/kubectl-karmadaquota_<os>_<arch>.tar.gz (the Krew artifact of
deploy/krew/karmadaquota.yaml) and prints its path and sha256. The archive holds:

    kubectl-karmadaquota   the entry point, run by the user's python3 (>= 3.11)
    LICENSE
    lib/                   karmadaquota's plugin modules and the pure-Python packages they
                           import: PyYAML (without its optional C extension), pydantic,
                           annotated-types, typing-extensions, typing-inspection
    lib/cp3XX/             pydantic-core, compiled, one directory per CPython version

Why not a zipapp: the plugin validates quota specs with pydantic, whose core is a compiled
extension (pydantic-core) built per platform and per CPython minor version (no abi3 wheels);
zipimport cannot load extension modules. Krew unpacks an archive per os/arch, so the compiled
part ships unpacked, once per supported CPython, and the entry point picks the one that runs it.
The server's packages (aiohttp, kopf, kubernetes-asyncio, prometheus-client, orjson) are not in
it: the plugin does not import them, which the build checks.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import importlib.machinery
import importlib.metadata
import io
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[1]
ENTRY = "karmadaquota.kubectl_plugin"
NAME = "kubectl-karmadaquota"
# Pure-Python distributions the plugin's modules need, and the compiled one.
PURE = ("PyYAML", "pydantic", "annotated-types", "typing-extensions", "typing-inspection")
NATIVE = "pydantic-core"
# What the plugin's own modules may import besides the standard library.
PROVIDED = {"yaml", "pydantic"}
# Krew os/arch -> pip platform tags of pydantic-core wheels (pip adds the older compatible ones).
PLATFORMS = {
    "linux/amd64": "manylinux2014_x86_64",
    "linux/arm64": "manylinux2014_aarch64",
    "darwin/amd64": "macosx_11_0_x86_64",
    "darwin/arm64": "macosx_11_0_arm64",
}
_EXTENSION = (*importlib.machinery.EXTENSION_SUFFIXES, ".so", ".pyd")

LAUNCHER = '''\
#!/usr/bin/env python3
"""kubectl-karmadaquota, as bundled by hack/build-plugin.sh for %(target)s."""
import os
import sys

if sys.version_info < (3, 11):
    sys.exit("kubectl-karmadaquota needs Python 3.11 or newer; python3 is %%d.%%d"
             %% sys.version_info[:2])
LIB = os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib")
NATIVE = os.path.join(LIB, "cp%%d%%d" %% sys.version_info[:2])
if not os.path.isdir(NATIVE):
    sys.exit(
        "kubectl-karmadaquota: this bundle supports Python %(pythons)s; python3 is %%d.%%d "
        "(or install the package: pip install karmadaquota)" %% sys.version_info[:2]
    )
sys.path[:0] = [LIB, NATIVE]
try:
    import pydantic_core  # noqa: F401
except ImportError as e:
    sys.exit("kubectl-karmadaquota: this bundle is for %(target)s: %%s" %% e)
from karmadaquota.kubectl_plugin import main

sys.exit(main())
'''


def fail(message: str) -> NoReturn:
    sys.exit(f"build-plugin: {message}")


def plugin_modules() -> list[str]:
    """karmadaquota modules the plugin imports, transitively (any import statement, at any
    depth: the plugin imports some inside functions); fails on a third-party import the bundle
    does not provide."""
    seen: set[str] = set()
    todo = ["karmadaquota", ENTRY]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = module_path(module)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
                names += [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                fail(f"{path}: relative import; use absolute ones")
            for name in names:
                top = name.split(".")[0]
                if top == "karmadaquota":
                    if find_module(name) is not None:
                        todo.append(name)
                elif top not in sys.stdlib_module_names and top not in PROVIDED:
                    fail(f"{path} imports {top}: not in the plugin bundle (PROVIDED)")
    return sorted(seen)


def find_module(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_path(module: str) -> Path:
    path = find_module(module)
    if path is None:
        fail(f"no source for {module}")
    assert path is not None
    return path


def check_closure() -> str:
    """Every runtime requirement of the bundled distributions is bundled; pydantic-core's
    version, pinned by pydantic."""
    bundled = {canonical(n) for n in (*PURE, NATIVE)}
    for dist in (*PURE, NATIVE):
        for req in importlib.metadata.requires(dist) or []:
            if re.search(r"\bextra\s*==", req):
                continue
            name = canonical(re.split(r"[\s\[<>=!~;(]", req, maxsplit=1)[0])
            if name not in bundled:
                fail(f"{dist} requires {name}: add it to PURE")
    pins = [
        r for r in importlib.metadata.requires("pydantic") or [] if canonical(r).startswith(NATIVE)
    ]
    match = re.search(r"==\s*([\w.]+)", pins[0]) if pins else None
    if match is None:
        fail(f"pydantic does not pin {NATIVE}")
    return match.group(1)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def copy_distribution(dist: str, into: Path) -> None:
    """A distribution's installed files, without metadata, byte code or compiled extensions."""
    files = importlib.metadata.files(dist) or []
    located = importlib.metadata.distribution(dist)
    for f in files:
        parts = f.parts
        if (
            parts[0].endswith((".dist-info", ".egg-info"))
            or ".." in parts
            or "__pycache__" in parts
            or f.name.endswith((".pyc", *_EXTENSION))
        ):
            continue
        source = Path(str(located.locate_file(f)))
        target = into.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def copy_native_installed(into: Path) -> None:
    """pydantic-core as installed in this interpreter, compiled extension included."""
    located = importlib.metadata.distribution(NATIVE)
    for f in importlib.metadata.files(NATIVE) or []:
        if f.parts[0] != "pydantic_core" or "__pycache__" in f.parts:
            continue
        target = into.joinpath(*f.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(str(located.locate_file(f))), target)


def fetch_native(version: str, pip_platform: str, python: str, into: Path) -> None:
    """pydantic-core==version for (platform, CPython), downloaded by pip and unpacked."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                f"--platform={pip_platform}",
                f"--python-version={python}",
                "--implementation=cp",
                f"--dest={tmp}",
                f"{NATIVE}=={version}",
            ],
            check=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                if member.startswith("pydantic_core/") and not member.endswith("/"):
                    target = into / member
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(member))


def this_target() -> str:
    system = platform.system().lower()
    machine = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    return f"{system}/{machine}"


def build(out: Path, target: str | None, pythons: list[str]) -> Path:
    version = check_closure()
    stage = Path(tempfile.mkdtemp(prefix="plugin-", dir=out))
    lib = stage / "lib"
    for module in plugin_modules():
        source = module_path(module)
        dest = lib / source.relative_to(REPO)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)
    for dist in PURE:
        copy_distribution(dist, lib)
    if target is None:
        target = this_target()
        pythons = [f"{sys.version_info[0]}.{sys.version_info[1]}"]
        copy_native_installed(lib / f"cp{sys.version_info[0]}{sys.version_info[1]}")
    else:
        if target not in PLATFORMS:
            fail(f"--target {target}: one of {', '.join(PLATFORMS)}")
        if not pythons:
            fail("--target needs at least one --python X.Y")
        for python in pythons:
            fetch_native(version, PLATFORMS[target], python, lib / f"cp{python.replace('.', '')}")
    launcher = stage / NAME
    launcher.write_text(LAUNCHER % {"target": target, "pythons": ", ".join(pythons)})
    launcher.chmod(0o755)
    shutil.copyfile(REPO / "LICENSE", stage / "LICENSE")
    archive = out / f"{NAME}_{target.replace('/', '_')}.tar.gz"
    buffer = io.BytesIO()
    # reproducible: sorted members, no times, owners or umask in the archive
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in sorted(stage.rglob("*")):
            if path.is_file():
                info = tar.gettarinfo(str(path), path.relative_to(stage).as_posix())
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                info.mode = 0o755 if path == launcher else 0o644
                with path.open("rb") as f:
                    tar.addfile(info, f)
    archive.write_bytes(buffer.getvalue())
    shutil.rmtree(stage)
    return archive


def main() -> None:
    p = argparse.ArgumentParser(prog="hack/build-plugin.sh", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "dist")
    p.add_argument("--target", help=f"os/arch: {', '.join(PLATFORMS)} (default: this machine)")
    p.add_argument("--python", action="append", default=[], help="CPython X.Y (with --target)")
    args = p.parse_args()
    if args.python and not args.target:
        p.error("--python goes with --target (without it: this interpreter's version)")
    args.out.mkdir(parents=True, exist_ok=True)
    archive = build(args.out, args.target, args.python)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    print(f"{archive}\nsha256: {digest}")


if __name__ == "__main__":
    main()
