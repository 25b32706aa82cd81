"""``report --stdio`` on recordings made by Linux perf on other machines,
against the text perf 6.1 prints for them (``tests/data/perfdata/
report-fixtures.perf-6.1.txt``; regenerate with ``python
tests/unit/test_report_perf_fixtures.py PERF``). These files come from
another kernel, so there are no kernel symbols and no vdso image for them:
kernel module addresses are named after the recording's own module MMAPs
(``[ath9k]``, offsets in the module), ``[vdso]`` addresses stay unresolved,
``--sort pid`` rows are threads (perf's ``pid`` key), the CPU column prints
``-001`` for a sample without a CPU, the Samples column is 12 wide.

Entry filters (--pid/--tid/--comms/--dsos/--symbols) are compared where the
sort keys hold what they filter: perf marks an entry filtered by its first
sample alone, so with ``--tid T --sort dso`` it hides every DSO whose first
sample came from another thread; pmuscope keeps the rows of T's samples.

Not compared: the default Children view of call-chain files (perf keys an
unresolved call-chain entry by its absolute address and its leaf by the
map-relative one, so it shows both; pmuscope shows one), and ``sym`` without
``dso`` (perf's comparator is no consistent order there).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import SHARED_FIXTURES
from tests.unit.test_report_perf_order import body as _body


def body(text: str) -> str:
    """The table from its first '#' note line (perf's "# comm: X" of a one-name filter)."""
    lines = text.splitlines()
    notes = [ln.rstrip() for ln in lines[:8] if re.match(r"^# (comm|dso|symbol): ", ln)]
    return "\n".join(notes + [_body(text)])

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "..", "data", "perfdata", "report-fixtures.perf-6.1.txt")
CASES = [
    ("perf_data_converter/perf.data.callgraph-3.8", "--sort comm,dso --no-children"),
    ("perf_data_converter/perf.data.callgraph-3.8", "--sort pid --no-children"),
    ("perf_data_converter/perf.data.callgraph-3.8", "--sort cpu --no-children -g none"),
    ("perf_data_converter/perf.data.callgraph-3.8", "--sort dso -n --no-children"),
    ("perf_data_converter/perf.data.callgraph-3.8", "--sort comm,dso,sym --no-children -g none --percent-limit 0.1"),
    ("perf_data_converter/perf.data.singleprocess-3.8", "-n"),
    ("perf_data_converter/perf.data.singleprocess-3.8", "--sort cpu,pid"),
    # event groups: perf's group view (one table, a percentage and a sample count per member)
    ("perf_data_converter/perf.data.lost_samples-4.4", "--sort comm,dso,sym"),
    ("perf_data_converter/perf.data.lost_samples-4.4", "-n --sort dso"),
    ("perf_data_converter/perf.data.lost_samples-4.4", "--no-group --sort pid"),
    ("perf_data_converter/perf.data.group_desc-4.14", "--percent-limit 5"),
    # perf's entry filters: rows of these, percentages of every sample, one name above the table
    ("perf_data_converter/perf.data.callgraph-3.8", "--comms chrome --no-children -g none --percent-limit 0.2"),
    ("perf_data_converter/perf.data.callgraph-3.8", "--dsos libc-2.15.so,chrome --sort comm,sym --no-children "
                                                     "-g none --percent-limit 0.2"),
    ("perf_data_converter/perf.data.callgraph-3.8", "--tid 13642,13777 --sort pid,dso --no-children"),
    ("perf_data_converter/perf.data.callgraph-3.8", "-S __memcpy_ssse3_back --sort comm,dso,sym --no-children "
                                                     "-g none"),
    ("perf_data_converter/perf.data.callgraph-3.8", "--percentage relative --comms chrome --no-children -g none "
                                                     "--percent-limit 0.5"),
]


def expected() -> dict[tuple[str, str], str]:
    with open(EXPECTED) as f:
        parts = re.split(r"^=== (\S+) (.*)\n", f.read(), flags=re.M)
    return {(parts[i], parts[i + 1]): parts[i + 2].rstrip("\n") for i in range(1, len(parts), 3)}


@pytest.mark.parametrize("name,opts", CASES)
def test_text_is_perfs(shared_fixtures, capsys, name, opts):
    from pmuscope.cli.main import main

    assert main(["report", "--stdio", *opts.split(), "-i", str(shared_fixtures / name)]) == 0
    assert body(capsys.readouterr().out) == expected()[(name, opts)]


if __name__ == "__main__":  # regenerate with Linux perf (argv[1]: the perf binary)
    perf = sys.argv[1] if len(sys.argv) > 1 else "perf"
    out = []
    for name, opts in CASES:
        r = subprocess.run([perf, "report", "--stdio", *opts.split(), "-i", str(SHARED_FIXTURES / name)],
                           capture_output=True, text=True, check=True)
        out.append(f"=== {name} {opts}\n{body(r.stdout)}\n")
    with open(EXPECTED, "w") as f:
        f.write("".join(out))


def test_script_kernel_frames_like_perf(shared_fixtures, capsys):
    """perf script's lines for kernel addresses of another machine's recording
    (perf 6.1's own text): module frames of a call chain as they are, with the
    module's path; a user address sampled in kernel mode (skid) has no DSO."""
    from pmuscope.cli.main import main

    assert main(["script", "-i", str(shared_fixtures / "perf_data_converter/perf.data.callgraph-3.8")]) == 0
    out = capsys.readouterr().out
    assert "\tffffffffc00b4955 [unknown] (/lib/modules/3.8.11/kernel/drivers/net/wireless-3.4/ath/ath9k/" \
           "ath9k_hw.ko)\n" in out
    assert "\tffffffff96613abf [unknown] ([kernel.kallsyms])\n" in out
    assert "\t           dff47 [unknown] (/lib64/libc-2.15.so)\n" in out  # user frames: map-relative
    assert main(["script", "-i", str(shared_fixtures / "perf_data_converter/perf.data.lost_samples-4.4")]) == 0
    out = capsys.readouterr().out
    assert "echo  6288  3325.069513:      20003              cycles:pp:      7f1671bcf6c1 [unknown] ([unknown])\n" \
        in out


PERF_G_SMALL_STATS = """
Aggregated stats:
           TOTAL events:        582
            MMAP events:          1  ( 0.2%)
            COMM events:         40  ( 6.9%)
            EXIT events:         41  ( 7.0%)
            FORK events:         40  ( 6.9%)
          SAMPLE events:        265  (45.5%)
           MMAP2 events:        187  (32.1%)
  FINISHED_ROUND events:          2  ( 0.3%)
        ID_INDEX events:          1  ( 0.2%)
      THREAD_MAP events:          1  ( 0.2%)
         CPU_MAP events:          1  ( 0.2%)
    EVENT_UPDATE events:          2  ( 0.3%)
   FINISHED_INIT events:          1  ( 0.2%)
cpu-clock stats:
          SAMPLE events:        265
"""


def test_stats_like_perf(capsys):
    """report --stats: perf 6.1's text for perf-g-small.data (record types by number, their
    shares, then each event's samples), and LOST_SAMPLES records per event of a grouped file."""
    from pmuscope.cli.main import main
    from tests.conftest import DATA

    assert main(["report", "--stats", "-i", str(DATA / "perfdata" / "perf-g-small.data")]) == 0
    assert capsys.readouterr().out == PERF_G_SMALL_STATS
    assert main(["report", "--stats", "-i", str(SHARED_FIXTURES / "perf_data_converter/perf.data.lost_samples-4.4")]) == 0
    out = capsys.readouterr().out
    assert "    LOST_SAMPLES events:          2  ( 0.8%)\n  FINISHED_ROUND events:          1  ( 0.4%)\n" \
           "cycles:pp stats:\n          SAMPLE events:         97\n    LOST_SAMPLES events:          1\n" \
           "instructions:pp stats:\n" in out
