"""Folded stacks and the flame-graph tree, without a browser."""

import json
import re

import pytest

from pmuscope.errors import FormatError
from pmuscope.profile.flamegraph import build_tree, render_html
from pmuscope.profile.folded import fold, format_folded, parse_folded


def test_fold_and_roundtrip():
    folded = fold([(["main", "a;b", "c"], 3), (["main", "x"], 2), (["main", "x"], 1), (["main"], 0)])
    assert folded == {"main;a:b;c": 3, "main;x": 3}
    text = format_folded(folded)
    assert text == "main;a:b;c 3\nmain;x 3\n"
    assert parse_folded(text) == folded


def test_frames_may_contain_spaces_the_last_space_is_the_count():
    assert parse_folded("main;operator new (unsigned long) 7\n") == {"main;operator new (unsigned long)": 7}


def test_malformed_line_names_the_line():
    with pytest.raises(FormatError, match=r"prof.folded:2: expected"):
        parse_folded("a;b 1\na;b x\n", source="prof.folded")


def test_tree_totals():
    root = build_tree({"a;b": 3, "a;c": 2, "d": 5})
    assert root.total == 10
    assert root.children["a"].total == 5 and root.children["a"].children["b"].total == 3
    assert root.children["d"].total == 5


def test_html_embeds_pruned_tree_and_escapes():
    folded = {"main;hot": 10_000, "main;cold": 1, "main;</script><b>x": 500}
    page = render_html(folded, title="t<1>", min_width=0.001)
    data = json.loads(re.search(r'<script id="fgdata" type="application/json">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    names = data["names"]
    assert "cold" not in names  # 1 of 10,501 is under min_width and merged away
    assert "hot" in names and "</script><b>x" in names
    assert "<title>t&lt;1&gt;</title>" in page
    assert page.count("</script>") == 2  # the data never closes its script element
    tree = data["tree"]
    assert tree[1] == 10_501  # root total keeps every sample
