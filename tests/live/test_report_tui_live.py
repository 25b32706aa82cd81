"""pmuscope report on a real terminal opens the browser (run in a pseudo-
terminal, quit with q); piped, the text is the --stdio text byte for byte;
annotate opens from the browser on a program compiled here."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time

import pytest

pytest.importorskip("textual", reason="the tui extra (textual) is not installed")

from tests.conftest import DATA  # noqa: E402

FILE = str(DATA / "perfdata" / "perf-g-small.data")


def test_piped_output_is_the_stdio_text():
    run = lambda *a: subprocess.run([sys.executable, "-m", "pmuscope", "report", "-i", FILE, *a],  # noqa: E731
                                    capture_output=True, timeout=120)
    piped, stdio = run(), run("--stdio")
    assert piped.returncode == 0 and piped.stdout == stdio.stdout
    assert b"Children      Self  Command" in piped.stdout


def test_terminal_opens_the_browser(tmp_path):
    if shutil.which("script") is None:
        pytest.skip("util-linux 'script' (a pseudo-terminal) is not installed")
    log = tmp_path / "tty.log"
    # script copies the terminal to its stdout as well as to the log: that copy goes to /dev/null, because
    # an unread pipe fills up (the browser paints ~50 KB), script then blocks and the 'q' never arrives.
    proc = subprocess.Popen(["script", "-qec", f"{sys.executable} -m pmuscope report -i {FILE}", str(log)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={"TERM": "xterm-256color", "COLUMNS": "150", "LINES": "45",
                                 **{k: v for k, v in __import__("os").environ.items() if k not in ("TERM",)}})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.3)
            if log.exists() and b"q quit" in log.read_bytes():
                break
        # press q until the browser quits (a key typed before it reads its input may be dropped)
        while proc.poll() is None and time.monotonic() < deadline + 30:
            proc.stdin.write(b"q")
            proc.stdin.flush()
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                pass
        assert proc.returncode == 0, "the browser did not quit on q"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    screen = log.read_bytes().decode("utf-8", "replace")
    assert "Samples: 265  of event" in screen and "q quit" in screen
    assert "# Children" not in screen  # not the text report


SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) double work(const double *a, int n) {
    double s = 0;
    for (int r = 0; r < 300; r++)
        for (int i = 0; i < n; i++)
            s += a[i] * a[i] / (1.0 + a[i]);
    return s;
}
int main(void) {
    int n = 100000;
    double *a = malloc(n * sizeof *a);
    for (int i = 0; i < n; i++) a[i] = i * 0.5;
    printf("%f\n", work(a, n));
    return 0;
}
"""


def test_annotate_from_the_browser(perf_bin, tmp_path):
    from pmuscope.profile import load_profile
    from pmuscope.tui.report_app import ReportApp

    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler")
    (tmp_path / "hot.c").write_text(SOURCE)
    subprocess.run([cc, "-O2", "-g", "-o", str(tmp_path / "hot"), str(tmp_path / "hot.c")], check=True)
    data = str(tmp_path / "hot.data")
    subprocess.run([perf_bin, "record", "-q", "-e", "cpu-clock", "-o", data, str(tmp_path / "hot")], check=True,
                   capture_output=True, timeout=120)
    app = ReportApp(load_profile(data), sort=("dso", "sym"))
    shots = []

    async def go():
        async with app.run_test(size=(150, 45)) as pilot:
            await pilot.pause(0.05)
            shots.append(app.screen_text())
            await pilot.press("a")
            await pilot.pause(0.2)
            shots.append(app.screen_text())
            await pilot.press("b")
            await pilot.pause(0.05)
            shots.append(app.screen_text())
    asyncio.run(go())
    first = next(ln for ln in shots[0].splitlines() if ln[:2] in ("+ ", "- ", "· "))
    assert first.split()[-1] == "work"
    assert "Annotate work" in shots[1] and "Source code & Disassembly of hot" in shots[1]
    assert "addsd" in shots[1] or "divsd" in shots[1]
    assert "Annotate" not in shots[2] and "work" in shots[2]


def test_switch_events(perf_bin, tmp_path):
    from pmuscope.profile import load_profile
    from pmuscope.tui.report_app import ReportApp

    data = str(tmp_path / "two.data")
    r = subprocess.run([perf_bin, "record", "-q", "-e", "cpu-clock,task-clock", "-o", data, "--", sys.executable,
                        "-m", "pmuscope.workloads", "busy", "0.3"], capture_output=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr[-200:]}")
    app = ReportApp(load_profile(data))
    shots = []

    async def go():
        async with app.run_test(size=(150, 45)) as pilot:
            await pilot.pause(0.05)
            shots.append(app.screen_text())
            await pilot.press("e")
            await pilot.pause(0.05)
            shots.append(app.screen_text())
            await pilot.press("tab")
            await pilot.pause(0.05)
            shots.append(app.screen_text())
    asyncio.run(go())
    assert "of event 'cpu-clock'" in shots[0]
    assert "of event 'task-clock'" in shots[1]
    assert "of event 'cpu-clock'" in shots[2]
