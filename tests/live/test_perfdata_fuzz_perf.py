"""Where perf still shows samples, pmuscope shows them too: mutants of a real
perf recording (every integer field at its edge values, tests/fieldfuzz.py)
read by ``perf report --stats`` and by pmuscope under the commands' perf-like
tolerance must agree on the number of samples whenever perf reads the file.
(pmuscope may read more files than perf: a damaged record perf refuses to go
past, pmuscope skips and counts.)"""

from __future__ import annotations

import re
import subprocess
import warnings

import pytest

from pmuscope.errors import PmuscopeError

from tests.conftest import DATA
from tests.fieldfuzz import mutants

#: every STEP-th mutant of the corpus file (the whole sweep runs in the unit suite)
STEP = 4


def _perf_samples(perf: str, path: str) -> int | None:
    try:
        out = subprocess.run([perf, "report", "--stats", "-i", path], capture_output=True, text=True, timeout=30).stdout
    except subprocess.TimeoutExpired:
        return None  # perf hung on it: nothing to compare
    m = re.search(r"SAMPLE events:\s+(\d+)", out)
    return int(m.group(1)) if m else None


def test_samples_perf_reads_are_read(perf_bin, tmp_path, monkeypatch):
    from pmuscope import _policy
    from pmuscope.profile.model import load_profile

    monkeypatch.setattr(_policy, "STRICT_READS", False)  # what the commands use
    data = (DATA / "perfdata" / "perf-g-small.data").read_bytes()
    path = str(tmp_path / "m.data")
    compared, differ = 0, []
    for n, (what, value, buf) in enumerate(mutants(data, per_type=1)):
        if n % STEP:
            continue
        with open(path, "wb") as f:
            f.write(buf)
        theirs = _perf_samples(perf_bin, path)
        if theirs is None:
            continue
        compared += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ours = len(load_profile(path, kernel_symbols=False))
        except PmuscopeError as err:
            ours = f"refused: {err}"
        if ours != theirs:
            differ.append((what, hex(value), theirs, ours))
    assert compared > 50
    assert not differ, f"{len(differ)} of {compared} files perf reads differ:\n" + "\n".join(map(str, differ[:15]))
