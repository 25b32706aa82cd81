"""The numatop memory-areas view fed by Arm SPE load records (synthesized
packets, decoded, mapped by memory_area_view), driven with textual's Pilot."""

from __future__ import annotations

import pytest

pytest.importorskip("textual", reason="the tui extra (textual) is not installed")

from tests.unit.test_numa_spe import PID, ROOT, _node_of, _spe_samples  # noqa: E402
from tests.unit.test_numa_tui import _drive, _rows, two_node  # noqa: E402,F401


def _spe_latency(pid, tid=None):
    from pmuscope.numa.latency import memory_area_view
    from pmuscope.numa.model import read_maps

    assert pid == PID
    return memory_area_view(_spe_samples(), read_maps(ROOT, pid), pid, tid=tid, ns_per_cycle=0.5,
                            node_of=_node_of([]), name="SPE")


def test_memory_areas_from_spe(two_node):  # noqa: F811
    _, _, screens = _drive(two_node, [("m",), ("q",)], latency_fn=_spe_latency)
    maps = dict(screens)[("m",)]
    assert "Memory areas of process 100" in maps
    # ADDR SIZE(K) PERMS ACCESS% LAT(ns) N0(K) N1(K) DESC: 2 of the 4 in-area SPE loads each, hand-computed means
    assert ["400000", "4", "r-xp", "50.0", "100", "20", "0", "/usr/bin/mgen"] in _rows(maps)
    assert ["7f0000000000", "400", "rw-p", "50.0", "400", "240", "160", "[anon]"] in _rows(maps)
    assert "ACCESS%/LAT from 6 load samples (SPE); by node of the page: node0 66.7% 100ns  node1 33.3% 500ns" in maps
