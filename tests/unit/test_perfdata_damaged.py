"""Damaged optional metadata is a warning, not a refusal: like perf, the
commands read the samples and name what was skipped. The library stays strict
unless asked (``strict=False``)."""

from __future__ import annotations

import re
import struct

import pytest

from pmuscope.cli.main import main
from pmuscope.errors import FormatError
from pmuscope.perfdata import Feature, PerfDataFile
from tests.conftest import SHARED_FIXTURES

# every test here runs over both record decoders (C and numpy)
pytestmark = pytest.mark.usefixtures("decode_path")

SLEEP = SHARED_FIXTURES / "linux-perf-data" / "sleep.data"
PIPE_WITH_TRAILING_TEXT = SHARED_FIXTURES / "linux-perf-data" / "sleep.compressed2.pipe.data"


def _corrupt_feature(blob: bytearray, bit: int, *, table: bool = False) -> bytearray:
    flags = struct.unpack_from("<4Q", blob, 72)
    bits = [w * 64 + b for w in range(4) for b in range(64) if flags[w] >> b & 1]
    data_off, data_size = struct.unpack_from("<QQ", blob, 40)
    at = data_off + data_size
    if table:  # the file ends inside the feature table
        return blob[: at + 8]
    i = bits.index(bit)
    struct.pack_into("<QQ", blob, at + 16 * i, len(blob) + 4096, 64)  # HOSTNAME points past the end
    return blob


def _samples(path) -> int:
    with PerfDataFile(path) as pf:
        return sum(pf.sample_counts())


@pytest.fixture
def damaged(tmp_path):
    blob = bytearray(SLEEP.read_bytes())
    path = tmp_path / "hostname-past-end.data"
    path.write_bytes(_corrupt_feature(blob, Feature.HOSTNAME))
    return path


def test_library_default_is_strict(damaged):
    with pytest.raises(FormatError, match="HOSTNAME.*runs past the end"):
        PerfDataFile(damaged)


def test_lenient_reader_skips_the_section_and_reads_every_sample(damaged):
    with pytest.warns(UserWarning, match="HOSTNAME"):
        pf = PerfDataFile(damaged, strict=False)
    with pf:
        assert Feature.HOSTNAME in pf.feature_errors and Feature.HOSTNAME not in pf.features
        assert sum(pf.sample_counts()) == _samples(SLEEP) > 0


@pytest.mark.parametrize("cmd", [["report"], ["script"], ["export", "-f", "folded", "-o", "-"]])
def test_commands_warn_and_read_the_samples(damaged, capsys, cmd):
    rc = main([*cmd, "-i", str(damaged)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    warn = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(warn) == 1 and "HOSTNAME" in warn[0] and "skipped" in warn[0], err
    assert "Traceback" not in err
    if cmd == ["report"]:
        assert re.search(rf"# Samples: {_samples(SLEEP)}\s+of event", out), out


def test_feature_table_past_the_end(tmp_path, capsys):
    path = tmp_path / "cut.data"
    path.write_bytes(_corrupt_feature(bytearray(SLEEP.read_bytes()), 0, table=True))
    rc = main(["report", "-i", str(path)])
    out, err = capsys.readouterr()
    assert rc == 0 and "feature table runs past the end" in err
    assert re.search(rf"# Samples: {_samples(SLEEP)}\s+of event", out), out


def test_pipe_file_with_trailing_garbage_reads_its_samples(capsys):
    rc = main(["script", "-i", str(PIPE_WITH_TRAILING_TEXT)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.count("cycles:P") > 0
    assert "warning" in err and "at byte 31808" in err and "Traceback" not in err
