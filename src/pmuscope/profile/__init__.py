"""Profiles: stacks and weights from records + symbols; reports and exporters.

>>> from pmuscope.profile import load_profile, build_report, format_report
>>> p = load_profile("perf.data")                        # doctest: +SKIP
>>> print(format_report(build_report(p, ("comm", "dso", "sym"))))  # doctest: +SKIP

- :class:`Profile` / :func:`load_profile` / :func:`build_profile` /
  :class:`ProfileBuilder` — every sample as numpy columns, symbolized leaf
  and call stacks as frame ids (``pmuscope.profile.model``).
- :func:`build_report`, :func:`format_report`, :func:`report_json` — perf
  report's overhead table (``pmuscope.profile.report``), with each row's call
  graph when asked (``call_graph="graph,0.5,caller"``, perf's ``-g``;
  :class:`CallGraphParams`, :func:`parse_call_graph`, ``pmuscope.profile.callchain``).
- :func:`iter_script`, :func:`format_script` — perf script's text.
- :func:`folded_stacks`, :func:`write_folded`, :func:`write_flamegraph`.
"""

import os as _os
import struct as _struct

from pmuscope._lazy import lazy_exports

#: files whose data section is larger take the numpy path (:mod:`pmuscope.profile.lite`)
LITE_MAX_DATA_BYTES = 256 << 10


def lite_candidate(path) -> bool:
    """Whether ``path`` is a regular file-mode perf.data whose data section is
    small enough for the numpy-free path: read from its first 56 bytes, so a
    command learns it before importing that path (~1 ms) for a large file."""
    if not isinstance(path, (str, _os.PathLike)) or not _os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(56)
    except OSError:
        return False
    return len(head) == 56 and head[:8] == b"PERFILE2" and _struct.unpack_from("<Q", head, 8)[0] != 16 and \
        _struct.unpack_from("<Q", head, 48)[0] <= LITE_MAX_DATA_BYTES

#: public name -> submodule defining it, imported on first use (a command
#: loads only what it needs: ``script`` never imports the HTML exporters)
_LAZY = {
    "Profile": ".model", "ProfileBuilder": ".model", "build_profile": ".model", "load_profile": ".model",
    "Report": ".report", "ReportRow": ".report", "build_report": ".report", "format_report": ".report",
    "parse_sort": ".report", "report_json": ".report", "reports_by_event": ".report",
    "CallGraphParams": ".callchain", "CallNode": ".callchain", "parse_call_graph": ".callchain",
    "format_script": ".script", "iter_script": ".script", "iter_script_bytes": ".script", "parse_fields": ".script",
    "folded_stacks": ".export", "frame_labels": ".export", "write_flamegraph": ".export", "write_folded": ".export",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "Profile", "ProfileBuilder", "build_profile", "load_profile",
    "Report", "ReportRow", "build_report", "format_report", "parse_sort", "report_json", "reports_by_event",
    "CallGraphParams", "CallNode", "parse_call_graph",
    "format_script", "iter_script", "iter_script_bytes", "parse_fields",
    "folded_stacks", "frame_labels", "write_flamegraph", "write_folded",
]
