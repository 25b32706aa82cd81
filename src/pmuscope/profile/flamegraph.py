"""A self-contained interactive HTML flame graph (no network access needed).

Click a frame to zoom into it (its ancestors stay visible, dimmed), click the
root or *Reset zoom* to go back, type in *Search* to highlight matching frames
(with the matched share of samples), hover for name, samples and percentage,
and toggle between an icicle graph (root at the top, the default) and a flame
graph (root at the bottom). Frames narrower than ``min_width`` of the total are
merged away, as flamegraph.pl's ``--minwidth`` does, so huge profiles stay light.

The page opens on the part of the graph that holds the samples: in icicle
mode the root and the widest frames are the first rows whatever the depth of
the stacks. Frames narrower than half a pixel at the current zoom are not
drawn, a tower of thin frames (under 3 px) is cut 8 rows below the deepest
wider frame (its last frame drawn with a dotted edge; a click zooms into it
and shows the rest), and the chart is only as tall as the deepest frame drawn:
a 128-deep tower of 2 samples neither makes an empty page nor pushes the graph
down. Switching to flame mode scrolls the root row into view.

The data is a tree of ``[name_index, total, children...]`` with a string
table, embedded as JSON; the page draws absolutely positioned ``div``s.
"""

from __future__ import annotations

import html
import json
from typing import Mapping

from .folded import parse_folded


class _Node:
    __slots__ = ("name", "total", "children")

    def __init__(self, name: str) -> None:
        self.name = name
        self.total = 0
        self.children: dict[str, _Node] = {}


def build_tree(folded: Mapping[str, int], root_name: str = "all") -> _Node:
    root = _Node(root_name)
    for stack, count in folded.items():
        if count <= 0:
            continue
        root.total += count
        node = root
        for frame in stack.split(";") if stack else ():
            child = node.children.get(frame)
            if child is None:
                child = node.children[frame] = _Node(frame)
            child.total += count
            node = child
    return root


def _encode(root: _Node, min_count: float) -> tuple[list, list[str]]:
    names: dict[str, int] = {}

    def idx(name: str) -> int:
        i = names.get(name)
        if i is None:
            i = names[name] = len(names)
        return i

    def enc(node: _Node) -> list:
        kids = sorted((c for c in node.children.values() if c.total >= min_count), key=lambda c: c.name)
        return [idx(node.name), node.total, *[enc(c) for c in kids]]

    # iterative depth guard: Python recursion is fine for realistic depths (<= 1000 frames)
    return enc(root), list(names)


def render_html(folded: Mapping[str, int] | str, *, title: str = "pmuscope flame graph", subtitle: str = "",
                unit: str = "samples", min_width: float = 0.0005, icicle: bool = True) -> str:
    """Render folded stacks (a mapping or folded text) as one HTML document
    (``icicle=False`` opens it in flame mode, root at the bottom)."""
    if isinstance(folded, str):
        folded = parse_folded(folded)
    root = build_tree(folded)
    tree, names = _encode(root, max(1.0, root.total * min_width))
    data = json.dumps({"tree": tree, "names": names, "unit": unit, "icicle": icicle}, separators=(",", ":"))
    data = data.replace("</", "<\\/")  # never close the script element early
    return (_TEMPLATE.replace("__TITLE__", html.escape(title))
            .replace("__SUBTITLE__", html.escape(subtitle))
            .replace("__DATA__", data))


def write_html(folded: Mapping[str, int] | str, path: str, **kwargs) -> str:
    from ..outfile import write_output

    return write_output(path, render_html(folded, **kwargs))


_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
 html{scrollbar-gutter:stable}
 body{margin:0;font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#fff;color:#222}
 header{display:flex;gap:12px;align-items:center;padding:8px 12px;border-bottom:1px solid #ddd;flex-wrap:wrap}
 h1{font-size:15px;margin:0;font-weight:600} .sub{color:#666}
 button,input{font:inherit;padding:2px 8px} input{width:220px}
 #matched{color:#a30} #status{padding:4px 12px;height:16px;color:#333;border-top:1px solid #eee;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
 #chart{position:relative;margin:6px 12px;overflow:hidden}
 .f{position:absolute;height:16px;line-height:16px;box-sizing:border-box;border:1px solid #fff;border-width:0 1px 1px 0;
    overflow:hidden;white-space:nowrap;text-overflow:ellipsis;padding-left:3px;cursor:pointer;border-radius:2px;color:#000}
 .f.dim{opacity:.45} .f.hit{background:#e040fb!important;color:#fff}
 .f:hover{outline:1px solid #000;z-index:1}
 .icicle .f.cut{border-bottom:3px dotted #333} .flame .f.cut{border-top:3px dotted #333}
</style></head>
<body>
<header><h1>__TITLE__</h1><span class="sub">__SUBTITLE__</span>
 <button id="reset" type="button">Reset zoom</button>
 <button id="toggle" type="button">Flame</button>
 <input id="search" type="search" placeholder="Search (regex)" aria-label="search">
 <span id="matched"></span></header>
<div id="chart" role="img" aria-label="flame graph (icicle: root at the top)"></div>
<div id="status"></div>
<script id="fgdata" type="application/json">__DATA__</script>
<script>
"use strict";
(function(){
const D = JSON.parse(document.getElementById("fgdata").textContent);
const names = D.names, unit = D.unit, ROW = 17, MINPX = 0.5, THIN = 3, EXTRA = 8;
const chart = document.getElementById("chart"), status = document.getElementById("status");
const matchedEl = document.getElementById("matched");
// nodes: flat list with parent links, built once
const nodes = [];
(function walk(n, parent, depth){
  const node = {name: names[n[0]], total: n[1], parent: parent, depth: depth, kids: [], x: 0, el: null};
  nodes.push(node);
  if (parent) parent.kids.push(node);
  for (let i = 2; i < n.length; i++) walk(n[i], node, depth + 1);
})(D.tree, null, 0);
const root = nodes[0];
let zoom = root, icicle = !!D.icicle, query = null;
function color(name){
  if (/_\[k\]$/.test(name) || /^\[kernel|kallsyms\]/.test(name)) return "hsl(" + (20 + hash(name) % 20) + ",85%,62%)";
  if (/_\[j\]$/.test(name)) return "hsl(" + (100 + hash(name) % 30) + ",60%,55%)";
  if (/\[unknown\]/.test(name)) return "#ccc";
  return "hsl(" + (hash(name) % 40) + "," + (60 + hash(name + "s") % 25) + "%," + (55 + hash(name + "l") % 12) + "%)";
}
function hash(s){ let h = 2166136261; for (let i = 0; i < s.length; i++){ h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return Math.abs(h); }
function pct(v){ return (100 * v / root.total).toFixed(2) + "%"; }
function isAncestor(a, n){ for (let p = n; p; p = p.parent) if (p === a) return true; return false; }
function layout(again){
  // x in [0,1] relative to the zoomed node; ancestors of zoom span the full width
  const W = chart.clientWidth || 1000;
  for (const n of nodes){ n.vis = false; }
  for (let p = zoom; p; p = p.parent){ p.vis = true; p.x = 0; p.w = 1; }
  (function place(n, x, w){
    n.vis = true; n.x = x; n.w = w; let cx = x;
    for (const k of n.kids){ const kw = w * k.total / n.total; place(k, cx, kw); cx += kw; }
  })(zoom, 0, 1);
  // frames narrower than MINPX are not drawn; towers of thin (< THIN px) frames are cut EXTRA rows
  // below the deepest wide frame (the cut frame says so; a click zooms in and shows the rest), and
  // the chart is only as deep as the deepest frame drawn
  let wide = 0;
  for (const n of nodes){
    n.drawn = n.vis && n.w * W >= MINPX; n.cut = false;
    if (n.drawn && n.w * W >= THIN && n.depth > wide) wide = n.depth;
  }
  const cap = wide + EXTRA;
  let depth = 0, cuts = 0;
  for (const n of nodes){
    if (!n.drawn) continue;
    if (n.depth > cap){ n.drawn = false; if (n.depth === cap + 1 && !n.parent.cut){ n.parent.cut = true; cuts++; } continue; }
    if (n.depth > depth) depth = n.depth;
  }
  chart.style.height = ((depth + 1) * ROW) + "px";
  for (const n of nodes){
    const px = n.w * W;
    if (!n.drawn){ if (n.el) n.el.style.display = "none"; continue; }
    if (!n.el){
      const el = document.createElement("div"); el.className = "f"; el.textContent = n.name;
      el.style.background = color(n.name); el.__node = n; n.el = el; chart.appendChild(el);
    }
    const el = n.el; el.style.display = "";
    el.style.left = (n.x * W) + "px"; el.style.width = Math.max(px, 1) + "px";
    const row = icicle ? n.depth : (depth - n.depth);
    el.style.top = (row * ROW) + "px";
    el.classList.toggle("dim", n !== zoom && isAncestor(n, zoom));
    el.classList.toggle("hit", !!(query && query.test(n.name)));
    el.classList.toggle("cut", n.cut);
    el.title = n.name + "\n" + n.total.toLocaleString() + " " + unit + " (" + pct(n.total) + ")" +
      (n.cut ? "\n(deeper frames not shown: click to zoom)" : "");
    el.dataset.name = n.name; el.dataset.depth = n.depth;
    el.textContent = px > 30 ? n.name : "";
  }
  document.getElementById("toggle").textContent = icicle ? "Flame" : "Icicle";
  document.body.dataset.zoom = zoom.name; document.body.dataset.mode = icicle ? "icicle" : "flame";
  document.body.dataset.depth = String(depth); document.body.dataset.cut = String(cuts);
  chart.className = icicle ? "icicle" : "flame";
  // the new height may have added (or removed) the page's scroll bar, changing the width: once more
  if (!again && chart.clientWidth && chart.clientWidth !== W) layout(true);
}
// flame mode puts the root at the bottom of a chart that may be taller than the window: show it
function showZoomed(){ if (!icicle && zoom.el) zoom.el.scrollIntoView({block: "nearest"}); }
function matched(){
  if (!query){ matchedEl.textContent = ""; return; }
  // count each matching frame's samples once (skip frames under a matching ancestor)
  let total = 0;
  (function m(n){ if (query.test(n.name)) { total += n.total; return; } for (const k of n.kids) m(k); })(root);
  matchedEl.textContent = "Matched: " + pct(total);
  document.body.dataset.matched = String(total);
}
chart.addEventListener("click", e => {
  const n = e.target.__node; if (!n) return;
  zoom = (n === zoom && n.parent) ? n.parent : n; layout(); showZoomed();
});
chart.addEventListener("mousemove", e => {
  const n = e.target.__node;
  status.textContent = n ? (n.name + " — " + n.total.toLocaleString() + " " + unit + " (" + pct(n.total) + ")") : "";
});
document.getElementById("reset").addEventListener("click", () => { zoom = root; layout(); showZoomed(); });
document.getElementById("toggle").addEventListener("click", () => { icicle = !icicle; layout(); showZoomed(); });
document.getElementById("search").addEventListener("input", e => {
  const v = e.target.value;
  try { query = v ? new RegExp(v) : null; } catch (err) { query = null; }
  layout(); matched();
});
window.addEventListener("resize", () => layout());
layout(); showZoomed();
status.textContent = root.total.toLocaleString() + " " + unit + " in total; click a frame to zoom";
})();
</script></body></html>
"""
