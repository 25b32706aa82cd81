"""pmuscope annotate against perf annotate --stdio on a small C program
compiled here with -O2 -g and recorded with perf record -e cpu-clock."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

SOURCE = r"""
#include <stdlib.h>
#include <stdio.h>
__attribute__((noinline)) double work(const double *a, int n) {
    double s = 0;
    for (int r = 0; r < 300; r++)
        for (int i = 0; i < n; i++)
            s += a[i] * a[i] / (1.0 + a[i]);
    return s;
}
__attribute__((noinline)) void cold(void) { puts("never"); }
int main(int argc, char **argv) {
    int n = 100000;
    double *a = malloc(n * sizeof *a);
    for (int i = 0; i < n; i++) a[i] = i * 0.5;
    if (argc > 5) cold();
    printf("%f\n", work(a, n));
    return 0;
}
"""
LINE = re.compile(r"^\s+([\d.]+) :\s+([0-9a-f]+):\s+(.*?)\s*$")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    perf = shutil.which("perf")
    cc = shutil.which("gcc") or shutil.which("cc")
    if not perf or not cc:
        pytest.skip("needs perf and a C compiler")
    d = tmp_path_factory.mktemp("annotate")
    (d / "hot.c").write_text(SOURCE)
    subprocess.run([cc, "-O2", "-g", "-o", str(d / "hot"), str(d / "hot.c")], check=True, timeout=120)
    r = subprocess.run([perf, "record", "-q", "-e", "cpu-clock", "-o", str(d / "hot.data"), str(d / "hot")],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr.strip()[-200:]}")
    return perf, d


def _pmuscope(*args):
    return subprocess.run([sys.executable, "-m", "pmuscope", "annotate", *args], capture_output=True, text=True,
                          timeout=300)


def _shares(text):
    return {int(m.group(2), 16): (float(m.group(1)), m.group(3)) for m in map(LINE.match, text.splitlines()) if m}


def test_annotate_matches_perf_annotate(recording):
    perf, d = recording
    data = str(d / "hot.data")
    theirs_text = subprocess.run([perf, "annotate", "--stdio", "-s", "work", "-i", data], capture_output=True,
                                 text=True, timeout=120).stdout
    r = _pmuscope("-i", data, "-s", "work", "--stdio")
    assert r.returncode == 0, r.stderr
    ours, theirs = _shares(r.stdout), _shares(theirs_text)
    assert theirs, theirs_text[:2000]
    # the same instructions, the same text
    assert set(ours) == set(theirs)
    assert all(ours[a][1].split() == theirs[a][1].split() for a in theirs)
    # the same hottest instructions, shares within 1 point
    hot_t = sorted(theirs, key=lambda a: -theirs[a][0])[:3]
    hot_o = sorted(ours, key=lambda a: -ours[a][0])[:3]
    assert hot_t[0] == hot_o[0]
    for a in set(hot_t) | set(hot_o):
        assert abs(ours[a][0] - theirs[a][0]) <= 1.0, (hex(a), ours[a], theirs[a])
    assert abs(sum(v for v, _ in ours.values()) - 100.0) < 0.1
    # layout and source lines (the binary has debug info)
    head = r.stdout.splitlines()[0]
    assert head.startswith(" Percent |\tSource code & Disassembly of hot for cpu-clock (")
    assert "s += a[i] * a[i] / (1.0 + a[i]);" in r.stdout
    # source lines carry their line numbers in hot.c (SOURCE starts with an empty line)
    assert re.search(r"^\s+: 8\s+s \+= a\[i\]", r.stdout, re.M), r.stdout[:3000]
    assert re.search(r"^\s+: 4\s+__attribute__", r.stdout, re.M)


def test_annotate_json_and_default_symbol(recording):
    _, d = recording
    r = _pmuscope("-i", str(d / "hot.data"), "--json")
    assert r.returncode == 0, r.stderr
    (a,) = json.loads(r.stdout)["annotations"]
    assert a["symbol"] == "work" and a["dso"].endswith("/hot") and a["source"] is True
    ins = [ln for ln in a["lines"] if "addr" in ln]
    assert sum(ln["samples"] for ln in ins) == a["samples"] > 10


@pytest.mark.parametrize("args,env,msg", [
    (["-s", "no_such_function"], {}, "unknown symbol 'no_such_function'"),
    (["-s", "cold"], {}, "symbol 'cold' has no samples"),
    (["-s", "work"], {"PMUSCOPE_OBJDUMP": "/nonexistent/objdump"}, "needs objdump"),
])
def test_annotate_errors_are_one_line(recording, monkeypatch, args, env, msg):
    _, d = recording
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    r = _pmuscope("-i", str(d / "hot.data"), *args)
    assert r.returncode != 0
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_annotate_shared_library_symbol_matches_perf(perf_bin, tmp_path):
    """The hottest symbol of a Python workload (in libpython or the python
    binary, where link-time addresses and file offsets may differ): every
    instruction's share equal to perf annotate's."""
    data = str(tmp_path / "py.data")
    r = subprocess.run([perf_bin, "record", "-q", "-e", "cpu-clock", "-o", data, "--", sys.executable, "-m",
                        "pmuscope.workloads", "busy", "0.5"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr.strip()[-200:]}")
    j = _pmuscope("-i", data, "--json")
    assert j.returncode == 0, j.stderr
    sym = json.loads(j.stdout)["annotations"][0]["symbol"]
    theirs = _shares(subprocess.run([perf_bin, "annotate", "--stdio", "-s", sym, "-i", data], capture_output=True,
                                    text=True, timeout=300).stdout)
    if not theirs:
        pytest.skip(f"perf annotate printed nothing for {sym}")
    ours = _shares(_pmuscope("-i", data, "-s", sym).stdout)
    assert set(ours) == set(theirs)
    assert max(abs(ours[a][0] - theirs[a][0]) for a in theirs) <= 1.0
    hot = max(theirs, key=lambda a: theirs[a][0])
    assert ours[hot][0] == max(v for v, _ in ours.values())
