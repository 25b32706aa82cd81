"""`pmuscope report --html FILE` writes the self-contained report next to the table."""

import subprocess
import sys


def test_report_html_flag(shared_fixtures, tmp_path):
    src = shared_fixtures / "perf_data_converter" / "perf.data.callgraph-3.8"
    out = tmp_path / "report.html"
    cp = subprocess.run([sys.executable, "-m", "pmuscope", "report", "-i", str(src), "--stdio", "--html", str(out)],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert f"HTML report written to {out}" in cp.stderr
    page = out.read_text()
    assert page.lstrip().lower().startswith("<!doctype html>") and "1768" in page  # the fixture's documented sample count
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    assert "# Samples: 1K of event" in cp.stdout  # the table is still printed
