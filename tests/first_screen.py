"""The first screen of the HTML outputs (``pmuscope profile``'s flame graph,
``report --html``): profiles to load and the checks a person makes on opening
the page at a typical 1280x800 viewport without scrolling.

- :func:`deep_tower_profile` is a synthetic recording with a wide, normal
  graph (1000 samples, 5 frames deep) plus one 128-deep tower of 2 samples:
  before the pages capped thin towers, the flame graph opened 2,200 px tall
  with the real graph at the bottom.
- :func:`demo_profile` runs ``pmuscope profile`` on the bundled demo workload
  (its Python stacks reach perf's 127-frame limit).
- :func:`widest_frames` computes, from folded stacks alone, the frames (paths
  from the root) a page must show first: the widest ones.
- :func:`frames_in_viewport` reads the drawn frames of a page (or of the flame
  graph embedded in the report) in viewport coordinates.
"""

from __future__ import annotations

import os
import subprocess
import sys

from pmuscope.kernel import abi
from pmuscope.perfdata import synth
from pmuscope.profile import build_profile
from pmuscope.profile.folded import parse_folded
from pmuscope.records import AttrTable, RecordSource
from pmuscope.symbols import KernelSymbols, Symbolizer

VIEWPORT = (1280, 800)
COMM = "syn"
PID = 4343
TOWER = ["main"] + [f"deep_{i:03d}" for i in range(127)]  # 128 frames
#: root-first folded stacks (without the comm) -> samples; 1000 wide + the 2-sample tower
DEEP_FOLDED = {
    "main;parse;tokenize;next_char": 220,
    "main;parse;tokenize": 80,
    "main;parse;build_tree": 200,
    "main;solve;kernel_loop;inner": 300,
    "main;solve;kernel_loop": 100,
    "main;solve;memcpy": 50,
    "main;write": 50,
    ";".join(TOWER): 2,
}


def deep_tower_profile(tmp_dir: str):
    """A Profile of :data:`DEEP_FOLDED` (comm ``syn``), symbolized from a JIT
    perf map in ``tmp_dir``; its folded stacks are ``syn;`` + each key."""
    S = abi.PerfSample
    st = S.IP | S.TID | S.TIME | S.CPU | S.PERIOD | S.CALLCHAIN
    funcs = sorted({f for stack in DEEP_FOLDED for f in stack.split(";")})
    addr = {f: 0x400000 + 0x100 * i for i, f in enumerate(funcs)}
    with open(os.path.join(tmp_dir, f"perf-{PID}.map"), "w") as f:
        f.write("".join(f"{addr[x]:x} 100 {x}\n" for x in funcs))

    def sid(t):
        return synth.sample_id(st, pid=PID, tid=PID, time=t, cpu=0)

    recs = [synth.comm(PID, PID, COMM, sample_id=sid(1)),
            synth.mmap2(PID, PID, 0x400000, 0x100 * len(funcs), 0, "//anon", prot=7, flags=0x22, sample_id=sid(2))]
    t = 10
    for stack, count in DEEP_FOLDED.items():
        ips = [addr[x] + 0x10 for x in reversed(stack.split(";"))]  # callee first
        for _ in range(count):
            t += 1000
            recs.append(synth.sample(st, ip=ips[0], pid=PID, tid=PID, time=t, cpu=0, period=1000,
                                     callchain=[abi.PERF_CONTEXT_USER, *ips]))
    attr = abi.perf_event_attr(type=1, config=0, sample_type=int(st), sample_period=1000, sample_id_all=1)
    sym = Symbolizer(kernel=KernelSymbols.parse(""), tmp_dir=tmp_dir, vdso=False)
    table = AttrTable([(attr, [])], names=["cpu-clock"])
    return build_profile(RecordSource([b"".join(recs)], table), symbolizer=sym)


def demo_profile(tmp_dir: str) -> str:
    """Run ``pmuscope profile`` on the demo workload; returns the output prefix
    (``PREFIX.data``, ``.folded``, ``.html``)."""
    prefix = os.path.join(tmp_dir, "demo")
    subprocess.run([sys.executable, "-m", "pmuscope", "profile", "-e", "cpu-clock", "-o", prefix, "--top", "3", "--",
                    sys.executable, "-m", "pmuscope.workloads", "demo"], check=True, capture_output=True, timeout=180)
    return prefix


def widest_frames(folded: dict[str, int] | str, n: int = 5) -> list[tuple[tuple[str, ...], int]]:
    """The ``n`` widest frames of folded stacks as ``(path, samples)``: the
    path is the frame's names from the first frame under the root (the root,
    ``all``, is the whole profile and is the first entry, path ``()``); ties go
    to the shallower frame, then by name."""
    if isinstance(folded, str):
        folded = parse_folded(folded)
    totals: dict[tuple[str, ...], int] = {(): 0}
    for stack, count in folded.items():
        totals[()] += count
        parts = stack.split(";") if stack else []
        for i in range(1, len(parts) + 1):
            key = tuple(parts[:i])
            totals[key] = totals.get(key, 0) + count
    order = sorted(totals.items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0]))
    return order[:n]


# every drawn frame of a flame graph document, in the top page's viewport coordinates; DOC is the
# flame graph's document, OX/OY the offset of its frame (0 for the stand-alone page)
_FRAMES_JS = """(() => { const doc = DOC; const fr = FRAME; const ox = fr ? fr.getBoundingClientRect().x : 0,
    oy = fr ? fr.getBoundingClientRect().y : 0;
  const clip = fr ? fr.getBoundingClientRect() : {top: 0, bottom: window.innerHeight, left: 0, right: window.innerWidth};
  const chart = doc.getElementById('chart').getBoundingClientRect();
  return {frames: [...doc.querySelectorAll('.f')].filter(e => e.style.display !== 'none').map(e => {
      const r = e.getBoundingClientRect();
      return {name: e.dataset.name, depth: +e.dataset.depth, x: ox + r.x, y: oy + r.y, w: r.width, h: r.height}; }),
    clip: {top: clip.top, bottom: clip.bottom, left: clip.left, right: clip.right},
    chart_w: chart.width, chart_h: chart.height, inner: [window.innerWidth, window.innerHeight],
    scroll: [window.scrollX, window.scrollY, doc.defaultView.scrollX, doc.defaultView.scrollY]}; })()"""


def frames_in_viewport(browser, embedded: bool = False) -> dict:
    """The drawn frames (``name, depth, x, y, w, h`` in viewport pixels) of the
    stand-alone flame graph, or of the one embedded in the report
    (``embedded``), with the visible box (``clip``: the window, or the
    iframe's box) and the scroll offsets."""
    if embedded:
        js = _FRAMES_JS.replace("DOC", "document.getElementById('flame').contentDocument") \
                       .replace("FRAME", "document.getElementById('flame')")
    else:
        js = _FRAMES_JS.replace("DOC", "document").replace("FRAME", "null")
    return browser.js(js)


def set_viewport(browser, width: int = VIEWPORT[0], height: int = VIEWPORT[1]) -> None:
    browser.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)


def check_first_screen(page: dict, folded, n: int = 5, min_px: float = 20.0) -> list[dict]:
    """Assert the ``n`` widest frames of ``folded`` are drawn inside the
    viewport (and inside the visible box of the flame graph) at their share of
    the chart's width, at least ``min_px`` wide, without any scrolling.
    Returns the matched frames."""
    W, H = page["inner"]
    clip = page["clip"]
    assert page["scroll"] == [0, 0, 0, 0], f"the page opened scrolled: {page['scroll']}"
    total = widest_frames(folded, 1)[0][1]
    found = []
    for path, samples in widest_frames(folded, n):
        name = path[-1] if path else "all"
        depth = len(path)
        want = page["chart_w"] * samples / total
        cands = [f for f in page["frames"] if f["name"] == name and f["depth"] == depth]
        assert cands, f"frame {name!r} at depth {depth} ({samples} samples) is not drawn"
        f = min(cands, key=lambda c: abs(c["w"] - want))
        assert abs(f["w"] - want) <= 2, f"{name}: {f['w']:.1f} px wide, want {want:.1f}"
        assert f["w"] >= min_px, f"{name}: only {f['w']:.1f} px wide"
        assert 0 <= f["y"] and f["y"] + f["h"] <= H, f"{name} is outside the {W}x{H} viewport: y={f['y']:.0f}"
        assert clip["top"] <= f["y"] and f["y"] + f["h"] <= clip["bottom"], f"{name} is outside the flame graph's box"
        assert 0 <= f["x"] and f["x"] + min(f["w"], min_px) <= W
        found.append(f)
    return found
