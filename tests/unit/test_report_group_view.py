"""perf's group view of a recording with call chains (``perf record -e
'{a,b}' -g``): one table per group leader, the Children and Self columns
(or Overhead with ``--no-children``) with a percentage per member, the
leader's call graphs, rows every member has, in perf's order -- the leader's
Children period alone (``__hpp__sort_acc`` has no group case), then, for two
entries of one thread, the call chain's depth, then the Self period of the
leader and of each member in turn (``__hpp__sort``), then the sort keys.

The recording is written here (two threads of two processes, a JIT map each,
call chains of several depths, samples of the member event in frames the
leader never sampled, equal periods that only the members or the keys tell
apart); the expected texts (``tests/data/perfdata/report-group.perf-6.1.txt``)
are what Linux perf 6.1 prints for it, with the JIT maps in /tmp. Regenerate
them with ``python tests/unit/test_report_group_view.py PERF``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "..", "data", "perfdata", "report-group.perf-6.1.txt")
PROCS = {5151: "worker", 5152: "helper"}
FUNCS = ["main", "run", "step", "alloc", "fault", "copy", "hash"]
OPTIONS = ["", "-n", "--no-children", "--no-children -n", "-g caller", "-g none", "--sort dso,sym",
           "--sort pid -g none", "--percent-limit 20", "--no-children --percent-limit 10", "-g callee,0.5,fractal"]


def _addr(i: int) -> int:
    return 0x400000 + 0x100 * i + 0x10


def write_maps(folder: str) -> None:
    for pid in PROCS:
        with open(os.path.join(folder, f"perf-{pid}.map"), "w") as f:
            for i, fn in enumerate(FUNCS):
                f.write(f"{0x400000 + 0x100 * i:x} 80 {fn}\n")


def write_file(path: str) -> None:
    """``{cpu-clock,page-faults}``: leader samples along main -> run -> step
    (-> alloc / hash), member samples along main -> run -> alloc -> fault and
    in copy (a frame only the member has), the same counts for pairs of
    entries so that depth, member periods and names decide."""
    from pmuscope.kernel import abi
    from pmuscope.perfdata import synth
    from pmuscope.perfdata.features import Feature, GroupDesc
    from pmuscope.perfdata.writer import PerfDataWriter

    S = abi.PerfSample
    st = S.IDENTIFIER | S.IP | S.TID | S.TIME | S.CPU | S.PERIOD | S.CALLCHAIN
    lead_id, member_id = 101, 202
    recs, t = [], 1
    for pid, comm in PROCS.items():
        for rec in (lambda sid: synth.comm(pid, pid, comm, sample_id=sid),
                    lambda sid: synth.mmap2(pid, pid, 0x400000, 0x1000, 0, "//anon", prot=7, flags=0x22,
                                            sample_id=sid)):
            t += 1
            recs.append(rec(synth.sample_id(st, pid=pid, tid=pid, time=t, cpu=0, id=lead_id)))
    f = {name: _addr(i) for i, name in enumerate(FUNCS)}
    user = abi.PERF_CONTEXT_USER
    # (pid, event id, period, chain leaf first, times)
    plan = [
        (5151, lead_id, 1000, ["step", "run", "main"], 4),
        (5151, lead_id, 1000, ["alloc", "step", "run", "main"], 2),
        (5151, lead_id, 1000, ["hash", "run", "main"], 2),
        (5151, lead_id, 1000, ["copy", "main"], 1),
        (5152, lead_id, 1000, ["step", "main"], 3),
        (5152, lead_id, 1000, ["hash", "main"], 3),
        (5151, member_id, 7, ["fault", "alloc", "run", "main"], 3),
        (5151, member_id, 7, ["alloc", "step", "run", "main"], 1),
        (5151, member_id, 7, ["copy", "main"], 2),
        (5152, member_id, 7, ["fault", "main"], 2),
        (5152, member_id, 7, ["hash", "main"], 1),
    ]
    for cpu, (pid, sid, period, chain, times) in enumerate(plan):
        for _ in range(times):
            t += 1
            ips = [f[name] for name in chain]
            recs.append(synth.sample(st, id=sid, ip=ips[0], pid=pid, tid=pid, time=t, cpu=cpu % 2, period=period,
                                     callchain=[user, *ips]))
    lead = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1000, sample_id_all=1)
    member = abi.perf_event_attr(type=1, config=2, sample_type=int(st), sample_period=7, sample_id_all=1)
    with PerfDataWriter(path, [(lead, [lead_id], "cpu-clock"), (member, [member_id], "page-faults")],
                        host=False) as w:
        w.features[Feature.GROUP_DESC] = [GroupDesc("{anon_group}", 0, 2)]
        w.write(b"".join(recs))


def body(text: str) -> str:
    """From '# Total Lost Samples' to the last line before perf's closing tip,
    trailing blanks cut (perf pads its last column)."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# Total Lost Samples"))
    end = max(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    return "\n".join(lines[start:end + 1])


def expected() -> dict[str, str]:
    with open(EXPECTED) as f:
        parts = re.split(r"^=== report(.*)\n", f.read(), flags=re.M)
    return {parts[i].strip(): parts[i + 1].rstrip("\n") for i in range(1, len(parts), 2)}


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    folder = tmp_path_factory.mktemp("group")
    write_maps(str(folder))
    path = str(folder / "group.data")
    write_file(path)
    return path, str(folder)


def _ours(capsys, jit_maps_in, recording, options):
    from pmuscope.cli.main import main

    path, folder = recording
    jit_maps_in(folder)
    assert main(["report", "--stdio", *options.split(), "-i", path]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("options", OPTIONS)
def test_text_is_perfs(capsys, jit_maps_in, recording, options):
    assert body(_ours(capsys, jit_maps_in, recording, options)) == expected()[options]


def test_no_group_is_a_table_per_event(capsys, jit_maps_in, recording):
    """--no-group: the members' own tables, the member's Children view with its call graphs."""
    text = _ours(capsys, jit_maps_in, recording, "--no-group")
    assert re.findall(r"^# Samples: \S+ +of events? '([^']+)'", text, flags=re.M) == ["cpu-clock", "page-faults"]
    member = text.split("of event 'page-faults'")[1]
    assert re.search(r"^\s+\d+\.\d+%\s+\d+\.\d+%\s+worker\s+\[JIT\] tid 5151\s+\[\.\] fault$", member, flags=re.M)
    assert "--fault" in member or "---fault" in member


def test_merge_order_rules():
    """The merged order on its own: the leader's Children period first, depth
    only within one thread, then the Self periods of leader and members, then
    the keys; entries only members have come last, by their Self periods."""
    from pmuscope.profile.group import Group, merge_group
    from pmuscope.profile.report_format import Report, ReportRow

    def row(sym, tid, acc, self_, depth, key):
        r = ReportRow({"sym": sym}, 1, float(self_), self_ / 10, children=acc / 10, children_samples=1,
                      children_period=float(acc))
        r.tie = (tid, depth, key)
        return r

    lead = Report("a", 10, 100, 0, ("sym",), children=True)
    member = Report("b", 10, 100, 0, ("sym",), children=True)
    for r in [row("x", 1, 50, 0, 1, (b"x",)), row("y", 1, 50, 0, 3, (b"y",)),    # one thread: depth decides
              row("p", 1, 30, 10, 1, (b"p",)), row("q", 2, 30, 10, 1, (b"q",)),  # two threads: members, keys
              row("r", 3, 30, 20, 1, (b"r",))]:
        lead.rows.append(r)
        lead.display.append({"sym": r.keys["sym"]})
    for r in [row("q", 2, 9, 9, 1, (b"q",)), row("z", 4, 5, 1, 1, (b"z",)), row("w", 4, 5, 3, 1, (b"w",))]:
        member.rows.append(r)
        member.display.append({"sym": r.keys["sym"]})
    out = merge_group([lead, member], Group(None, [0, 1]), ["a", "b"], children=True)
    assert [r.keys["sym"] for r in out.rows] == ["x", "y", "r", "q", "p", "w", "z"]
    q = out.rows[3]
    assert q.member_children == [3.0, 0.9] and q.member_overheads == [1.0, 0.9]
    assert out.rows[-1].member_children == [0.0, 0.5] and out.rows[-1].callchain is None
    assert out.chain_total == 100 and out.total_period == 200


def regenerate(perf: str) -> None:
    folder = tempfile.mkdtemp(prefix="pmuscope-group-")
    path = os.path.join(folder, "group.data")
    write_file(path)
    write_maps("/tmp")
    try:
        out = []
        for options in OPTIONS:
            text = subprocess.run([perf, "report", "--stdio", *options.split(), "-i", path], check=True,
                                  capture_output=True, text=True).stdout
            out.append(f"=== report {options}".rstrip() + "\n" + body(text) + "\n")
        with open(EXPECTED, "w") as f:
            f.write("".join(out))
    finally:
        for pid in PROCS:
            os.unlink(f"/tmp/perf-{pid}.map")


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))
    regenerate(sys.argv[1] if len(sys.argv) > 1 else "perf")
