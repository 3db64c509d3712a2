"""Every shell block marked `<!-- runnable -->` in README.md and docs/*.md runs as written.

Blocks that need a running Karmada (`make up`) are exercised by e2e/test_make_up.py instead.
The built binaries' folder is put first on PATH, as the README tells users to, then the running
interpreter's folder (the project venv's `bin/`, as `source .venv/bin/activate` would).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("KARMADAQUOTA_CACHE", Path.home() / ".cache" / "karmadaquota")) / "bin"
BLOCK = re.compile(r"<!-- runnable -->\s*\n```(?:bash|sh|console)\n(.*?)```", re.S)


def runnable_blocks() -> list[tuple[str, str]]:
    out = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for i, m in enumerate(BLOCK.finditer(doc.read_text())):
            out.append((f"{doc.relative_to(REPO)}#{i}", m.group(1)))
    return out


def test_the_docs_mark_runnable_blocks() -> None:
    assert len(runnable_blocks()) >= 3


@pytest.mark.parametrize(("where", "script"), runnable_blocks(), ids=lambda v: str(v)[:40])
def test_runnable_block_runs_as_written(where: str, script: str, tmp_path: Path) -> None:
    path = os.pathsep.join([str(BIN), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"{where} failed:\n{script}\n--- stderr ---\n{proc.stderr}"


def test_every_module_docs_architecture_names_exists() -> None:
    """The module tables (and the prose around them) name files as they are: `kube/retry.py`
    under karmadaquota/, `tests/…` and `e2e/…` from the repository's root — and every module
    of the package. A renamed, deleted or new module fails here until the page says so."""
    text = (REPO / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", text))
    assert named, "docs/architecture.md names no module"
    missing = [
        n
        for n in sorted(named)
        if not (REPO / n).exists() and not (REPO / "karmadaquota" / n).exists()
    ]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
    package = REPO / "karmadaquota"
    unnamed = [
        str(m.relative_to(package))
        for m in sorted(package.rglob("*.py"))
        if m.name != "__init__.py" and str(m.relative_to(package)) not in named
    ]
    assert not unnamed, f"modules docs/architecture.md does not name: {unnamed}"


def test_docs_architecture_draws_the_controllers_queues_as_the_code_has_them() -> None:
    """The picture of the controller's jobs names each queue the controller runs (with guards,
    enforcement labels and views on), and no other: a job added, renamed or folded into
    another fails here until the page says so."""
    from karmadaquota.controller.guard_keeper import GuardKeeper
    from karmadaquota.controller.leader import AlwaysLeader
    from karmadaquota.controller.manager import Controller
    from karmadaquota.controller.metrics import ControllerMetrics
    from tests.fake_api import FakeApiServer
    from tests.fake_members import Fleet

    text = (REPO / "docs" / "architecture.md").read_text()
    block = re.search(r"<!-- the controller's queues -->\s*\n```\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no picture of the controller's queues"
    drawn = set(re.findall(r"\[([a-z-]+)\]", block.group(1)))
    api = FakeApiServer()
    c = Controller(
        api,
        ControllerMetrics(),
        AlwaysLeader(),
        namespace_api=api,
        guards=GuardKeeper(Fleet(["member1"], {}).registry()),
    )
    assert c.enforcement is not None and c.views is not None
    assert drawn == {q.name for q in c.queues}


WHERE = re.compile(r"<!-- where to look -->\n(\|.*?)\n\n", re.S)
# issue 43: what a newcomer asks first, each answered in two hops (the table, then a file)
NEWCOMERS_QUESTIONS = (
    "what does a binding cost?",
    "who writes a quota's status, and how is a conflict handled?",
    "how is a waiting or queued workload admitted when room appears?",
)


def _where_to_look() -> dict[str, str]:
    """docs/architecture.md's first table: question -> its answer."""
    found = WHERE.search((REPO / "docs" / "architecture.md").read_text())
    assert found, "docs/architecture.md has no 'where to look' table"
    return {
        line.split("|")[1].strip(): line.split("|")[2] for line in found.group(1).splitlines()[2:]
    }


def test_where_to_look_answers_the_newcomers_questions_with_files_that_exist() -> None:
    """docs/architecture.md's first table answers, in two hops, what a newcomer asks first;
    every file it names exists (a moved module fails here until the table says where)."""
    rows = _where_to_look()
    for question in NEWCOMERS_QUESTIONS:
        assert question in rows, f"the table does not answer {question!r}"
    for question, answer in rows.items():
        files = re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", answer)
        assert files, f"{question!r} names no file"
        missing = [f for f in files if not (REPO / "karmadaquota" / f).exists()]
        assert not missing, f"{question!r} names files that do not exist: {missing}"


# the one writer of quota status in each program (docs/architecture.md, "who writes a quota's
# status")
STATUS_WRITERS = {"controller/status_writer.py", "webhook/backend.py"}
# a status path of a KarmadaQuota or ClusterKarmadaQuota: `paths.quota_status(...)`,
# `paths.cluster_quota_status(...)`, or a path built by hand ending in /status
STATUS_PATH = re.compile(r"quota_status\(|/status[\"']")


def test_every_write_of_quota_status_goes_through_the_one_writer() -> None:
    """No module but the writers names a quota's status path: a second writer (a job writing
    status itself, a second compare-and-swap style) fails here."""
    package = REPO / "karmadaquota"
    found = sorted(
        f"{m.relative_to(package)}:{i}"
        for m in package.rglob("*.py")
        if str(m.relative_to(package)) not in STATUS_WRITERS | {"kube/paths.py"}
        for i, line in enumerate(m.read_text().splitlines(), 1)
        if STATUS_PATH.search(line)
    )
    assert not found, f"quota status written outside the one writer: {found}"
    for writer in STATUS_WRITERS:
        assert STATUS_PATH.search((package / writer).read_text()), f"{writer} writes no status"


@pytest.mark.parametrize("question", NEWCOMERS_QUESTIONS)
def test_where_to_look_answers_each_newcomers_question_in_two_hops(question: str) -> None:
    """The second hop is a module that says what it does: every file the answer names exists
    and opens with a docstring (the first named is where to start)."""
    rows = _where_to_look()
    assert question in rows, f"the table does not answer {question!r}"
    files = re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", rows[question])
    assert files, f"{question!r} names no file"
    for f in files:
        module = REPO / "karmadaquota" / f
        assert module.exists(), f"{question!r} names {f}, which does not exist"
        body = module.read_text().lstrip()
        assert body.startswith('"""'), f"{f} ({question!r}) does not say what it does"
