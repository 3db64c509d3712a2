"""Freed heap handed back (karmadaquota.trim): against this process's own glibc."""

from __future__ import annotations

import pytest

from karmadaquota import trim


@pytest.mark.skipif(trim._MALLOC_TRIM is None, reason="no glibc malloc_trim here")
def test_what_a_burst_freed_goes_back_to_the_system() -> None:
    """200,000 objects of 1 KB (malloc's, not CPython's small-object arenas: like a list's
    pages and status bodies) freed: glibc keeps most of them resident until trimmed."""
    burst = [bytearray(1000) for _ in range(200_000)]
    held = trim.rss_bytes()
    del burst
    freed = trim.trim()
    assert freed > 100 << 20
    assert trim.rss_bytes() < held - (100 << 20)


def test_without_glibc_nothing_is_done() -> None:
    assert trim.trim(None) == 0


def test_it_asks_malloc_for_every_free_page() -> None:
    pads: list[int] = []
    trim.trim(lambda pad: pads.append(pad) or 1)
    assert pads == [0]  # 0: keep no padding at the heap's top
