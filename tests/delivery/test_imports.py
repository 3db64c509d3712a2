"""The design's layers as the imports have them (issue 43): read from the source, so that an
import under `TYPE_CHECKING` or inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "karmadaquota"

# waiting for room, one idea: the loop, the selection, and its two ways of waiting
WAIT_FOR_ROOM = (
    "controller.room",
    "controller.wake",
    "controller.dequeue",
    "waiting",
    "queueing",
    "room_selection",
)


def imports(module: str) -> set[str]:
    """The karmadaquota modules `module` (dotted, under the package) imports anywhere."""
    tree = ast.parse((PACKAGE / (module.replace(".", "/") + ".py")).read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "karmadaquota":  # from karmadaquota import waiting, …
                out |= {a.name for a in node.names}
            elif node.module.startswith("karmadaquota."):
                out.add(node.module.removeprefix("karmadaquota."))
                # from karmadaquota.controller import room
                out |= {f"{node.module.removeprefix('karmadaquota.')}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {
                a.name.removeprefix("karmadaquota.")
                for a in node.names
                if a.name.startswith("karmadaquota.")
            }
    return {m for m in out if (PACKAGE / (m.replace(".", "/") + ".py")).exists()}


def test_the_wait_for_room_modules_form_no_circle() -> None:
    """room drives wake and dequeue through Protocols of its own; they import its loop."""
    graph = {m: imports(m) & set(WAIT_FOR_ROOM) for m in WAIT_FOR_ROOM}
    done: set[str] = set()

    def visit(m: str, path: tuple[str, ...]) -> None:
        assert m not in path, f"import circle: {' -> '.join((*path, m))}"
        if m in done:
            return
        for n in sorted(graph[m]):
            visit(n, (*path, m))
        done.add(m)

    for m in WAIT_FOR_ROOM:
        visit(m, ())
    assert "controller.room" in graph["controller.wake"]  # the check can see an import


def test_the_pending_charge_contract_sits_below_the_wire_models() -> None:
    """api's models encode and decode through pending, so pending reads no model of api."""
    assert "pending" in imports("api")
    assert "api" not in imports("pending")


def test_the_reconciler_knows_no_job_class() -> None:
    """It reads what the jobs found through `jobs.Findings`."""
    jobs = {
        "controller.orphan_audit",
        "controller.room",
        "controller.guard_keeper",
        "controller.enforcement",
        "controller.views",
    }
    assert not imports("controller.reconciler") & jobs
