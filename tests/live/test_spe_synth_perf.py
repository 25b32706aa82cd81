"""Arm SPE sample synthesis (l1d-miss ... memory, instructions) against Linux
perf on the same perf.data files: perf decodes SPE AUXTRACE data on any
architecture when the file's AUXTRACE_INFO names the SPE PMU type of one of
its attrs. The files are built from the real captures' records
(tests/spe_fixture.py); same events, same sample counts, same top symbols,
and `script` prints the same lines."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest

from pmuscope.spe.synth import parse_itrace, synthesize

from .. import spe_fixture
from ..conftest import ROOT

ENV = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
PMUSCOPE = [sys.executable, "-m", "pmuscope"]
SECTION = re.compile(r"^# Samples: (\d+)\s+of event '([^']+)'")
ROW = re.compile(r"^\s+([\d.]+)%\s+(\S+)\s+(\S+)\s+\[(.)\] (.+?)\s*$")

pytestmark = pytest.mark.skipif(not os.path.exists(spe_fixture.LIBC) or shutil.which("nm") is None,
                                reason="the fixture maps this machine's x86-64 libc (and reads its symbols with nm)")


def sections(text: str) -> dict[str, tuple[int, list[tuple[str, str]]]]:
    out: dict[str, tuple[int, list]] = {}
    cur = None
    for line in text.splitlines():
        m = SECTION.match(line)
        if m:
            cur = m.group(2)
            out[cur] = (int(m.group(1)), [])
            continue
        m = ROW.match(line)
        if m and cur is not None and not line.startswith("#"):
            # Overhead Command Shared-Object [x] Symbol (perf has a Children column first: dropped)
            fields = line.split()
            pct = fields[1].rstrip("%") if fields[1].endswith("%") else fields[0].rstrip("%")
            out[cur][1].append((pct, line.split("] ", 1)[1].strip()))
    return out


def perf_version(perf_bin) -> tuple[int, int]:
    out = subprocess.run([perf_bin, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def needs_perf_61_instructions(perf_bin, itrace: str) -> None:
    """pmuscope follows perf 6.1's instruction synthesis (a timeless queue's
    first sample is of the empty record); other perf versions may differ."""
    if "i" in itrace and perf_version(perf_bin) != (6, 1):
        pytest.skip(f"instruction sample rules are perf 6.1's; this perf is {perf_version(perf_bin)}")


def perf_report(perf_bin, path, *extra) -> dict:
    out = subprocess.run([perf_bin, "report", "--stdio", "--no-children", "-i", str(path), *extra],
                         capture_output=True, text=True, timeout=120).stdout
    return sections(out)


def ours_report(path, *extra) -> dict:
    out = subprocess.run([*PMUSCOPE, "report", "-i", str(path), *extra], capture_output=True, text=True,
                         timeout=120, env=ENV)
    assert out.returncode == 0, out.stderr
    return sections(out.stdout)


def agree(perf: dict, ours: dict, top: int = 3) -> None:
    assert list(ours) == list(perf)  # same events, in perf's order
    for ev in perf:
        assert ours[ev][0] == perf[ev][0], ev  # same sample counts
        # every symbol with the same share (rows of equal share may be listed in another order) ...
        assert sorted(ours[ev][1]) == sorted(perf[ev][1]), ev
        # ... and the same top symbols
        assert [s for _, s in ours[ev][1][:top]] == [s for _, s in perf[ev][1][:top]], ev


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("spe")
    out = {}
    for name, kw in {"spe": {}, "spe+pmu": {"with_pmu_event": True},
                     "nofeature": {"auxtrace_feature": False}}.items():
        out[name] = d / f"{name}.data"
        spe_fixture.build(out[name], **kw)
    return out


@pytest.mark.parametrize("name", ["spe", "spe+pmu", "nofeature"])
def test_report_default_events_agree(perf_bin, files, name):
    perf = perf_report(perf_bin, files[name])
    assert set(perf) >= {"l1d-miss", "l1d-access", "llc-miss", "llc-access", "tlb-miss", "tlb-access",
                         "branch-miss", "remote-access", "memory"}
    if name == "spe+pmu":
        assert list(perf)[0] == "cpu-clock"
    agree(perf, ours_report(files[name]))


@pytest.mark.parametrize("itrace", ["i1i", "i10i", "b", "fmM", "ta", "M"])
def test_report_itrace_agrees(perf_bin, files, itrace):
    needs_perf_61_instructions(perf_bin, itrace)
    perf = perf_report(perf_bin, files["spe+pmu"], f"--itrace={itrace}")
    ours = ours_report(files["spe+pmu"], f"--itrace={itrace}")
    agree(perf, ours)


def test_script_prints_perfs_lines(perf_bin, files):
    for name in ("spe", "spe+pmu"):
        perf = subprocess.run([perf_bin, "script", "-i", str(files[name])], capture_output=True, text=True,
                              timeout=120).stdout
        ours = subprocess.run([*PMUSCOPE, "script", "-i", str(files[name])], capture_output=True, text=True,
                              timeout=120, env=ENV)
        assert ours.returncode == 0, ours.stderr
        assert ours.stdout.splitlines() == perf.splitlines()
    needs_perf_61_instructions(perf_bin, "i1i")
    perf = subprocess.run([perf_bin, "script", "--itrace=i1i", "-i", str(files["spe"])], capture_output=True,
                          text=True, timeout=120).stdout
    ours = subprocess.run([*PMUSCOPE, "script", "--itrace=i1i", "-i", str(files["spe"])], capture_output=True,
                          text=True, timeout=120, env=ENV).stdout
    assert Counter(ours.splitlines()) == Counter(perf.splitlines())


def test_synthesized_counts_follow_the_records(files, tmp_path):
    from pmuscope.memory.spe import records_data_src
    from pmuscope.spe.perfdata import decode_perf_data

    recs = decode_perf_data(str(files["spe"]))
    ev = recs.columns["events"].astype("uint64")
    counts = synthesize(str(files["spe"]), tmp_path / "out.data")
    bits = {"l1d-miss": 3, "l1d-access": 2, "llc-miss": 9, "llc-access": 8, "tlb-miss": 5, "tlb-access": 4,
            "branch-miss": 7, "remote-access": 10}
    for name, bit in bits.items():
        assert counts[name] == int(((ev >> bit) & 1).sum()), name
    assert counts["memory"] == int((records_data_src(recs) != 0).sum()) == int((recs.op_class == 1).sum())
    assert "instructions" not in counts


def test_flamegraph_and_export_see_spe_events(files, tmp_path):
    folded = subprocess.run([*PMUSCOPE, "report", "-i", str(files["spe"]), "--folded", "-"], capture_output=True,
                            text=True, timeout=120, env=ENV)
    assert folded.returncode == 0, folded.stderr
    assert "malloc" in folded.stdout


def test_parse_itrace():
    assert parse_itrace(None).letters == "fmtbaM" and parse_itrace(None).period is None
    o = parse_itrace("i10i")
    assert o.letters == "i" and o.period == 10 and any("hardware-based" in w for w in o.warnings)
    o = parse_itrace("i")
    assert o.period is None and any("instruction-based" in w for w in o.warnings)
    assert parse_itrace("fmM").letters == "fmM"
    assert parse_itrace("i1i,b").letters == "ib"


def test_no_auxtrace_feature_bit(files):
    """perf reads an SPE file whose header lacks the AUXTRACE feature bit; so
    do report/script/mem (the AUX payloads are skipped, not read as records)."""
    from pmuscope.perfdata import Feature, PerfDataFile
    from pmuscope.profile._fastload import plain_data_chunks

    path = str(files["nofeature"])
    with PerfDataFile(path) as pf:
        assert Feature.AUXTRACE not in pf.features
        assert plain_data_chunks(pf, path) is None
    for cmd in (["script", "-i", path], ["mem", "report", "-i", path]):
        out = subprocess.run([*PMUSCOPE, *cmd], capture_output=True, text=True, timeout=120, env=ENV)
        assert out.returncode == 0 and "malformed" not in out.stderr, out.stderr
        assert out.stdout.strip()
