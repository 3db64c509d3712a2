"""Start-up heap freezing: survivors leave the collector's reach, start-up garbage does not."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from karmadaquota.heap import freeze_startup_heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # other tests run with an ordinary collector


def test_survivors_are_frozen_and_startup_garbage_is_freed(unfrozen: None) -> None:
    kept = Node()
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle only the collector can free
    dead = weakref.ref(a)
    del a, b
    frozen = freeze_startup_heap()
    assert dead() is None  # collected before the freeze, not kept for ever
    assert frozen == gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())  # out of the collector's reach


def test_objects_made_after_the_freeze_are_still_collected(unfrozen: None) -> None:
    freeze_startup_heap()
    a, b = Node(), Node()
    a.other, b.other = b, a
    dead = weakref.ref(a)
    del a, b
    gc.collect()
    assert dead() is None
