"""``pmuscope report``'s call graphs against ``perf report --stdio`` on a
recording made by Linux ``perf record -g``: the same top rows carry the same
top branches (entries, and shares within a tolerance), with and without the
Children column, in graph and fractal form; ``-g none`` hides the trees.

The workload is a small C program with branching and recursive calls
(compiled here; the Python busy loop stands in when there is no compiler).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

#: shares of an entry may differ by this many percentage points
TOLERANCE = 0.5
#: branches compared: those perf shows at this share or more
MIN_BRANCH = 2.0
#: rows compared: perf's rows at this overhead or more
MIN_ROW = 3.0

PROGRAM = r"""
#include <stdlib.h>
volatile unsigned long sink;
__attribute__((noinline)) void leaf_a(int n) { for (int i = 0; i < n; i++) sink += i; }
__attribute__((noinline)) void leaf_b(int n) { for (int i = 0; i < n; i++) sink ^= i * 3; }
__attribute__((noinline)) void mid(int n) { leaf_a(n / 3); leaf_b(n); for (int i = 0; i < n / 4; i++) sink += i; }
__attribute__((noinline)) void rec(int d, int n) { if (d == 0) { leaf_a(n); leaf_b(n / 2); return; }
                                                   leaf_b(n / 8); rec(d - 1, n); }
__attribute__((noinline)) void top1(int n) { leaf_a(n); leaf_b(n); mid(n); }
__attribute__((noinline)) void top2(int n) { mid(n); rec(3, n / 2); }
int main(int argc, char **argv) {
    long iters = atol(argc > 1 ? argv[1] : "1500");
    for (long k = 0; k < iters; k++) { top1(100000); top2(100000); }
    return 0;
}
"""

ROW = re.compile(r"^ {1,6}(\d+\.\d\d)%\s+(?:(\d+\.\d\d)%\s+)?(\S+)\s+(\S+)\s+\[.\] (.+?)\s*$")
CONNECTOR = re.compile(r"--(\d+\.\d\d%)--(.*)$")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    perf = shutil.which("perf")
    if not perf:
        pytest.skip("Linux perf is not installed (apt-get install linux-perf)")
    tmp = tmp_path_factory.mktemp("cg")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        (tmp / "tree.c").write_text(PROGRAM)
        exe = tmp / "tree"
        subprocess.run([cc, "-O1", "-fno-omit-frame-pointer", "-o", str(exe), str(tmp / "tree.c")], check=True,
                       capture_output=True, timeout=120)
        workload = [str(exe), "1500"]
    else:
        workload = [sys.executable, "-m", "pmuscope.workloads", "busy", "1"]
    path = str(tmp / "cg.data")
    r = subprocess.run([perf, "record", "-g", "-e", "cpu-clock", "-F", "2000", "-o", path, "--", *workload],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"perf record -g failed here: {r.stderr.strip()[-200:]}")
    return perf, path


def _perf(perf, path, *args):
    return subprocess.run([perf, "report", "--stdio", "--sort", "comm,dso,sym", "-i", path, *args],
                          capture_output=True, text=True, timeout=300).stdout


def _ours(path, *args):
    r = subprocess.run([sys.executable, "-m", "pmuscope", "report", "--sort", "comm,dso,sym", "-i", path, *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def parse_trees(text: str) -> dict:
    """perf's --stdio report -> {(comm, dso, sym): (overhead, tree)}; a tree
    node is [entries, share or None, children] (a run of entries drawn one
    under the other is one node, as perf's radix node)."""
    rows: dict = {}
    stack: list = []
    margin = 0
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = ROW.match(line)
        if m:
            root = [[], None, []]
            rows[(m.group(3), m.group(4), m.group(5))] = (float(m.group(1)), root)
            stack, margin = [root], 0
            continue
        if not stack or not line.startswith(" " * 12):
            continue
        if line[12:].startswith("---"):
            margin = 3
            stack[0][0].append(line[15:])
            continue
        c = CONNECTOR.search(line)
        if c and set(line[12 + margin:c.start()]) <= {" ", "|"}:
            depth = (c.start() - 12 - margin - 1) // 11 + 1
            node = [[c.group(2)], float(c.group(1)[:-1]), []]
            del stack[depth:]
            stack[-1][2].append(node)
            stack.append(node)
            continue
        name = line[12 + margin:].lstrip(" |")
        if name:
            depth = (len(line) - len(name) - 12 - margin) // 11
            stack[depth][0].append(name)
    return rows


def lone_run(node: list, overhead: float) -> list:
    """``node`` with its lone run of entries extended through every child that
    holds all but TOLERANCE points of the row: a branch of a sample or two below
    it (drawn or not) does not cut the run. For comparing call graphs unwound by
    DWARF, where one tool may unwind a rare sample further than the other (perf
    6.1's libunwind stopped an exit-handler sample at a bogus frame, pmuscope
    reached ``_start``): the rest of the tree compares as usual."""
    entries, share, kids = list(node[0]), node[1], node[2]
    while kids:
        top = max(kids, key=lambda k: k[1] or 0.0)
        if (top[1] or 0.0) < overhead - TOLERANCE:
            break
        entries += top[0]
        kids = top[2]
    return [entries, share, kids]


def _compare_branches(theirs: list, ours: list, where: str, depth: int = 0) -> int:
    """perf's branches at MIN_BRANCH% or more are ours too (entries equal,
    shares within TOLERANCE), two levels down; returns how many were compared."""
    mine = {tuple(n[0]): n for n in ours}
    done = 0
    for entries, share, kids in theirs:
        if share is None or share < MIN_BRANCH:
            continue
        key = tuple(entries)
        assert key in mine, f"{where}: perf's branch {key[:3]} ({share}%) not in ours: {[k[:3] for k in mine]}"
        got = mine[key]
        assert abs(got[1] - share) <= TOLERANCE, (where, key[:3], got[1], share)
        done += 1
        if depth < 1:
            done += _compare_branches(kids, got[2], f"{where} > {key[0]}", depth + 1)
    return done


@pytest.mark.parametrize("args", [["--children"], ["--no-children"], ["--children", "-g", "fractal"],
                                  ["--no-children", "-g", "caller"]],
                         ids=["children", "no-children", "children-fractal", "no-children-caller"])
def test_top_branches_match_perf(recording, args):
    perf, path = recording
    theirs = parse_trees(_perf(perf, path, *args))
    ours = parse_trees(_ours(path, *args))
    top = [(k, v) for k, v in theirs.items() if v[0] >= MIN_ROW]
    assert top, "perf printed no rows"
    compared = 0
    for key, (overhead, tree) in top:
        assert key in ours, f"perf's row {key} ({overhead}%) missing from ours: {list(ours)[:8]}"
        mine = ours[key][1]
        # a lone first run of entries ('---main ...') is the same
        assert mine[0] == tree[0], (key, mine[0][:5], tree[0][:5])
        compared += _compare_branches(tree[2], mine[2], str(key))
        if tree[0] or tree[2]:
            compared += 1
    assert compared >= len(top)  # every top row had a tree to compare


def test_no_call_graph_hides_trees(recording):
    perf, path = recording
    drawn = _ours(path)
    assert re.search(r"^ {12}---\S", drawn, re.M) and "%--" in drawn
    for args in (["-g", "none"], ["--no-call-graph"]):
        hidden = _ours(path, *args)
        assert "---" not in hidden and "%--" not in hidden
        rows = [ln for ln in hidden.splitlines() if ROW.match(ln)]
        # the same rows; their order may differ: with call graphs perf puts a caller above its
        # callee among equal Children rows, without them the sort keys decide (as perf does)
        assert sorted(rows) == sorted(ln for ln in drawn.splitlines() if ROW.match(ln))
        theirs = [ln.rstrip() for ln in _perf(perf, path, *args).splitlines() if ROW.match(ln)]
        assert [_unknown_level(ln) for ln in rows] == [_unknown_level(ln) for ln in theirs]


def _unknown_level(row: str) -> str:
    """A row with perf's level mark of an address outside every map made '?'.
    perf gives such a call-chain entry no level of its own: fill_callchain_info
    (util/callchain.c) leaves ``al->level`` as the entry before it set it, so the
    mark of an ``[unknown]`` Children row depends on which frame its first sample
    reached it from ([k] after a kernel frame); ours is the entry's own context."""
    m = ROW.match(row)
    if m and m.group(4) == "[unknown]":
        i = row.index("  [unknown]") + len("  [unknown]")
        j = row.index("] ", i) - 2
        return row[:j] + "[?]" + row[j + 3:]
    return row
