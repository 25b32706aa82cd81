"""Profiles: stacks and weights from records + symbols; reports and exporters.

>>> from pmuscope.profile import load_profile, build_report, format_report
>>> p = load_profile("perf.data")                        # doctest: +SKIP
>>> print(format_report(build_report(p, ("comm", "dso", "sym"))))  # doctest: +SKIP

- :class:`Profile` / :func:`load_profile` / :func:`build_profile` /
  :class:`ProfileBuilder` — every sample as numpy columns, symbolized leaf
  and call stacks as frame ids (``pmuscope.profile.model``).
- :func:`build_report`, :func:`format_report`, :func:`report_json` — perf
  report's overhead table (``pmuscope.profile.report``).
- :func:`iter_script`, :func:`format_script` — perf script's text.
- :func:`folded_stacks`, :func:`write_folded`, :func:`write_flamegraph`.
"""

from .model import Profile, ProfileBuilder, build_profile, load_profile
from .report import Report, ReportRow, build_report, format_report, parse_sort, report_json, reports_by_event
from .script import format_script, iter_script, iter_script_bytes, parse_fields
from .export import folded_stacks, frame_labels, write_flamegraph, write_folded

__all__ = [
    "Profile", "ProfileBuilder", "build_profile", "load_profile",
    "Report", "ReportRow", "build_report", "format_report", "parse_sort", "report_json", "reports_by_event",
    "format_script", "iter_script", "iter_script_bytes", "parse_fields",
    "folded_stacks", "frame_labels", "write_flamegraph", "write_folded",
]
