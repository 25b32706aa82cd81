"""pmuscope attr's text: perf -vv's perf_event_attr layout."""

from __future__ import annotations

from pmuscope.cli.main import main
from pmuscope.events.attr_text import attr_lines, format_attr
from pmuscope.kernel.abi import perf_event_attr


def test_layout_flags_and_unions():
    a = perf_event_attr(type=5, bp_type=3, sample_period=4000, freq=1, disabled=1)
    a.bp_addr, a.bp_len = 0x1000, 4
    a.sample_type = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 16) | (1 << 17)  # IP|TID|TIME|IDENTIFIER|TRANSACTION
    a.read_format = 3
    text = format_attr(a)
    lines = text.splitlines()
    assert lines[0] == "-" * 60 and lines[1] == "perf_event_attr:" and lines[-1] == "-" * 60
    assert "  type                             5" in lines
    assert "  { sample_period, sample_freq }   4000" in lines
    # perf's table has no TRANSACTION: left out as perf does
    assert "  sample_type                      IP|TID|TIME|IDENTIFIER" in lines
    assert "  read_format                      TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING" in lines
    assert "  { bp_addr, config1 }             0x1000" in lines
    assert "  { bp_len, config2 }              0x4" in lines
    names = [n for n, _ in attr_lines(a)]
    assert "config" not in names and "exclude_user" not in names  # zero fields are left out
    assert names.index("freq") < names.index("bp_type")


def test_cli_text_probe_and_all(capsys):
    assert main(["attr", "--no-probe", "mem:0x2000:w"]) == 0
    out = capsys.readouterr().out
    assert "perf_event_attr:" in out and "{ bp_addr, config1 }             0x2000" in out
    assert "config1 " not in out.replace("{ bp_addr, config1 }", "")
    assert main(["attr", "--all", "mem:0x2000:w"]) == 0
    assert "  config1                    0x2000" in capsys.readouterr().out
