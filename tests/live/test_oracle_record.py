"""Oracle for record sessions: pmuscope.events.record_defaults must build the
attrs ``perf record -vv -e STR -- true`` prints (the side-band dummy event
perf adds is left out)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pmuscope.events import parse_events, record_defaults
from pmuscope.events import pmu as pmu_mod
from pmuscope.events.defaults import TRACKING_BITS

from tests.live.test_oracle_perf import parse_perf_vv
from tests.unit.test_events_oracle_golden import COMPARED

FIELDS = COMPARED + ("sample_type", "sample_id_all", "mmap_data", "sample_regs_user", "sample_stack_user",
                     "sample_max_stack") + TRACKING_BITS + ("watermark",)  # fmt: skip

CORPUS = [
    "cycles", "cycles,instructions", "{cycles,instructions}", "cpu-clock:u", "task-clock:k,cs",
    "sched:sched_switch", "cycles:u,sched:sched_switch", "cycles/period=1000/", "cycles/freq=99/",
    "mem:0x1000:w", "L1-dcache-load-misses", "r003c:u", "cpu/event=0x76,umask=0x0/k", "{cpu-clock,task-clock}:u",
    "page-faults", "cpu-clock/call-graph=fp/", "cpu-clock/call-graph=dwarf/",
    "cpu-clock/call-graph=dwarf,stack-size=4096,max-stack=20/", "cpu-clock,task-clock/call-graph=dwarf/",
    "cpu-clock/max-stack=10,call-graph=fp/",
]  # fmt: skip


@pytest.fixture(scope="module")
def perf():
    path = shutil.which("perf")
    if not path or subprocess.run([path, "--version"], capture_output=True).returncode != 0:
        pytest.skip("Linux perf is not installed (apt-get install linux-perf)")
    return path


def perf_record_attrs(perf: str, text: str, tmp) -> list[dict[str, int]]:
    proc = subprocess.run(
        [perf, "record", "-vv", "-o", str(tmp / "perf.data"), "-e", text, "--", "true"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    events = parse_perf_vv(proc.stdout + proc.stderr, FIELDS)
    # drop perf's own side-band event (software dummy with watermark set)
    return [e for e in events if not (e["type"] == 1 and e["config"] == 9 and e["watermark"])]


@pytest.fixture(scope="module")
def perf_answers(perf, tmp_path_factory):
    from concurrent.futures import ThreadPoolExecutor

    def one(item):
        n, text = item
        return perf_record_attrs(perf, text, tmp_path_factory.mktemp(f"rec{n}"))

    # perf record mostly waits for its side-band thread: run the corpus concurrently
    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(CORPUS, pool.map(one, enumerate(CORPUS))))


@pytest.mark.parametrize("text", CORPUS)
def test_record_attr_matches_perf(perf_answers, perf, tmp_path, text):
    pmu_mod.clear_cache()
    expected = perf_answers[text]
    if text.startswith(("cycles", "{cycles", "L1", "r0", "cpu/")) and not _opens_cycles():
        return _no_pmu_outcome_matches_perf(perf, tmp_path, text, expected)
    ours = [{k: int(getattr(a, k)) for k in FIELDS} for a in record_defaults(parse_events(text))]
    assert ours == expected


def _no_pmu_outcome_matches_perf(perf: str, tmp_path, text: str, expected: list[dict[str, int]]) -> None:
    """Without a hardware PMU, perf record samples ``cycles`` with cpu-clock
    (evsel__fallback) and fails on any other hardware event: pmuscope record
    must do the same, with the same attrs where perf went on."""
    import sys

    theirs = subprocess.run([perf, "record", "-q", "-o", str(tmp_path / "p.data"), "-e", text, "--", "true"],
                            capture_output=True, text=True, timeout=60)
    mine = subprocess.run([sys.executable, "-m", "pmuscope", "record", "-q", "-o", str(tmp_path / "o.data"),
                           "-e", text, "--", "true"], capture_output=True, text=True, timeout=60)
    assert (mine.returncode == 0) == (theirs.returncode == 0), (text, theirs.stderr[-500:], mine.stderr[-500:])
    if theirs.returncode != 0:
        err = mine.stderr.strip().splitlines()
        assert "Traceback" not in mine.stderr and err, mine.stderr
        # one line, or a parse error with perf's caret under the string (no 'cpu' PMU here)
        assert len(err) == 1 and "hardware PMU" in err[0] or "cannot find PMU 'cpu'" in err[0], mine.stderr
        return
    # perf printed the failed cycles attr, then the cpu-clock one it opened instead
    opened = [e for n, e in enumerate(expected)
              if not ((e["type"], e["config"]) == (0, 0) and n + 1 < len(expected)
                      and (expected[n + 1]["type"], expected[n + 1]["config"]) == (1, 0))]
    ours = []
    for a in record_defaults(parse_events(text)):
        row = {k: int(getattr(a, k)) for k in FIELDS}
        if (row["type"], row["config"]) == (0, 0):
            row["type"], row["config"] = 1, 0
        ours.append(row)
    assert ours == opened
    assert "fell back to cpu-clock" in mine.stderr


def _opens_cycles() -> bool:
    from tests.conftest import hardware_pmu_reason

    return hardware_pmu_reason() is None


@pytest.mark.parametrize(
    "perf_args,callchain",
    [(["-g"], "fp"), (["--call-graph", "dwarf"], "dwarf"), (["--call-graph", "dwarf,16384"], "dwarf,16384")],
)
def test_record_callchain_option_matches_perf(perf, tmp_path, perf_args, callchain):
    proc = subprocess.run(
        [perf, "record", "-vv", *perf_args, "-o", str(tmp_path / "perf.data"), "-e", "cpu-clock,task-clock:u", "--", "true"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    expected = [e for e in parse_perf_vv(proc.stdout + proc.stderr, FIELDS) if not (e["config"] == 9 and e["watermark"])]
    ours = [{k: int(getattr(a, k)) for k in FIELDS} for a in record_defaults(parse_events("cpu-clock,task-clock:u"), callchain=callchain)]
    assert ours == expected
