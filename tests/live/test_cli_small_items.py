"""The smaller command-line items: each is one line, no traceback."""

from __future__ import annotations

from pmuscope.cli.main import main
from tests.conftest import DATA

SPE_RAW = DATA / "spe" / "spe-b1-ts0.data"


def _run(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def test_raw_event_wider_than_64_bits_is_a_parse_error(capsys):
    rc, _, err = _run(["stat", "-e", "r99999999999999999999", "--", "true"], capsys)
    assert rc == 2 and "more than 64 bits" in err


def test_stat_negative_delay(capsys):
    rc, _, err = _run(["stat", "-D", "-5", "--", "true"], capsys)
    assert rc == 1 and err.strip() == "pmuscope stat: -D -5: the delay must be 0 or more milliseconds"


def test_record_negative_duration_does_not_start_the_command(capsys, tmp_path):
    marker = tmp_path / "ran"
    rc, _, err = _run(["record", "-q", "-o", str(tmp_path / "p.data"), "--duration", "-1", "--",
                       "touch", str(marker)], capsys)
    assert rc == 1 and "--duration -1" in err and not marker.exists()


def test_c2c_record_is_mem_record(capsys, tmp_path):
    rc, _, err = _run(["c2c", "record", "-o", str(tmp_path / "c.data"), "--", "true"], capsys)
    assert "unrecognized arguments" not in err and "usage:" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if rc != 0:  # no memory-sampling PMU here: the mem record reason, in one line
        assert len(lines) == 1 and lines[0].startswith("pmuscope mem:"), err


def test_folded_input_that_is_binary(capsys, tmp_path):
    bad = tmp_path / "x.folded"
    bad.write_bytes(b"main;f 1\n\xff\xfe\x00binary")
    rc, _, err = _run(["export", "-i", str(bad), "--input-format", "folded", "-o", str(tmp_path / "o")], capsys)
    assert rc == 3 and "not folded stacks" in err and len(err.strip().splitlines()) == 1


def test_push_url_errors_and_credentials(capsys, tmp_path):
    folded = tmp_path / "x.folded"
    folded.write_text("main;f 1\n")
    rc, _, err = _run(["export", "-i", str(folded), "--push", "http://[::1"], capsys)
    assert rc == 1 and "bad push URL" in err
    rc, _, err = _run(["export", "-i", str(folded), "--push", "http://me:hunter2@127.0.0.1:1", "--push-timeout", "1"],
                      capsys)
    assert rc == 1 and "hunter2" not in err and "127.0.0.1:1" in err


def test_spe_strict_fails_before_printing(capsys, tmp_path):
    bad = tmp_path / "bad.spe"
    bad.write_bytes(SPE_RAW.read_bytes() + b"\x07\x07\x07\x07\x07\x07\x07\x07")
    rc, out, err = _run(["spe", "--raw", str(bad), "--dump", "--strict"], capsys)
    assert rc != 0 and out == "", out[:200]
    assert len(err.strip().splitlines()) == 1
    rc, out, _ = _run(["spe", "--raw", str(bad), "--dump"], capsys)
    assert rc == 0 and out  # without --strict the dump is printed (bad bytes skipped, as perf)


def test_unknown_tracepoint_id_is_not_blamed_on_seccomp(capsys):
    rc, _, err = _run(["stat", "-e", "tracepoint/config=1/", "--", "true"], capsys)
    if rc == 0:
        return  # a kernel where id 1 is a tracepoint perf may open
    assert "seccomp" not in err
