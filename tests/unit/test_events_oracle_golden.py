"""The perf oracle, offline: pmuscope's attrs (perf stat counting defaults
applied) must equal what Linux perf 6.1 printed with ``perf stat -vv`` for
every string of the corpus. The golden file was recorded on the machine whose
sysfs/tracefs tree is tests/data/sysfs/amd-epyc-kvm (regenerate with
``python -m tests.live.test_oracle_perf --write-golden``)."""

from __future__ import annotations

import json

import pytest

from pmuscope.events import parse_events, stat_defaults

from tests.conftest import DATA

ROOT = DATA / "sysfs" / "amd-epyc-kvm"
GOLDEN = ROOT / "perf-stat-vv.json"

#: attr fields compared with perf (perf prints the unions under their first names)
COMPARED = (
    "type", "config", "config1", "config2", "sample_period", "freq", "read_format", "disabled", "inherit",
    "pinned", "exclusive", "exclude_user", "exclude_kernel", "exclude_hv", "exclude_idle", "enable_on_exec",
    "precise_ip", "exclude_host", "exclude_guest", "exclude_callchain_kernel", "exclude_callchain_user", "bp_type",
)  # fmt: skip


def ours(text: str, sysfs_root: str) -> list[dict[str, int]]:
    """The compared attr fields pmuscope builds for a perf stat session of ``text``."""
    out = []
    for spec in parse_events(text, sysfs_root=sysfs_root):
        attr = stat_defaults(spec)
        out.append({k: int(getattr(attr, k)) for k in COMPARED})
    return out


def _golden() -> dict:
    if not GOLDEN.exists():
        return {"events": {}}
    return json.loads(GOLDEN.read_text())


def test_golden_corpus_is_broad():
    corpus = _golden()["events"]
    assert len(corpus) >= 60
    kinds = {
        "hardware": any(v[0]["type"] == 0 for v in corpus.values()),
        "software": any(v[0]["type"] == 1 for v in corpus.values()),
        "tracepoint": any(v[0]["type"] == 2 for v in corpus.values()),
        "cache": any(v[0]["type"] == 3 for v in corpus.values()),
        "raw/pmu": any(v[0]["type"] == 4 for v in corpus.values()),
        "breakpoint": any(v[0]["type"] == 5 for v in corpus.values()),
        "dynamic pmu": any(v[0]["type"] > 5 for v in corpus.values()),
        "group": any(len(v) > 1 and "{" in k for k, v in corpus.items()),
    }
    assert all(kinds.values()), kinds


@pytest.mark.parametrize("text", sorted(_golden()["events"]))
def test_matches_perf_stat_vv(text):
    expected = _golden()["events"][text]
    got = ours(text, str(ROOT))
    assert got == expected
