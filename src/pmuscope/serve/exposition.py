"""Prometheus exposition, written by hand: the classic text format 0.0.4 and
OpenMetrics 1.0.0, chosen from the scraper's ``Accept`` header.

A :class:`MetricFamily` holds one metric's metadata and its samples; the two
renderers differ only where the formats differ:

- OpenMetrics names a counter *family* without ``_total`` (the sample carries
  it), has ``# UNIT`` (the family name must end with ``_<unit>``), escapes ``"``
  in HELP, and must end with ``# EOF``;
- 0.0.4 names the family as the sample (``# TYPE x_total counter``) and knows
  no UNIT line.

Sources: prometheus.io/docs/instrumenting/exposition_formats and the
OpenMetrics 1.0 specification (ABNF of ``exposition``; "metricname-unit").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

_NAME_BAD = re.compile(r"[^a-zA-Z0-9_:]")
_LABEL_BAD = re.compile(r"[^a-zA-Z0-9_]")

COUNTER, GAUGE, INFO, UNKNOWN = "counter", "gauge", "info", "unknown"


def sanitize_name(text: str) -> str:
    """A valid metric name from any text (``power/energy-pkg/`` → ``power_energy_pkg``)."""
    out = _NAME_BAD.sub("_", text).strip("_")
    out = re.sub(r"__+", "_", out)
    if not out or out[0].isdigit():
        out = "_" + out
    return out


def sanitize_label_name(text: str) -> str:
    out = _LABEL_BAD.sub("_", text)
    if not out or out[0].isdigit():
        out = "_" + out
    return out


@dataclass
class MetricFamily:
    """One metric: ``name`` is the family name (a counter's without ``_total``;
    the renderers add it), ``unit`` the OpenMetrics unit (``seconds``; the name
    must then end with ``_seconds``), samples are ``(labels, value)``."""

    name: str
    type: str
    help: str
    unit: str = ""
    samples: list[tuple[Mapping[str, str], float]] = field(default_factory=list)

    def add(self, labels: Mapping[str, str], value: float) -> None:
        self.samples.append((labels, value))

    def __post_init__(self) -> None:
        if self.type == COUNTER and self.name.endswith("_total"):
            self.name = self.name[: -len("_total")]
        if self.type == INFO and self.name.endswith("_info"):
            self.name = self.name[: -len("_info")]
        if self.unit and not self.name.endswith("_" + self.unit):
            raise ValueError(f"metric {self.name!r} must end with its unit _{self.unit}")

    @property
    def sample_name(self) -> str:
        if self.type == COUNTER:
            return self.name + "_total"
        if self.type == INFO:
            return self.name + "_info"
        return self.name


def format_value(value: float) -> str:
    """Go's strconv-compatible value text: integers without ``.0``, ``+Inf``, ``NaN``."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str, openmetrics: bool) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if openmetrics else text


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in labels.items()) + "}"


def render(families: Iterable[MetricFamily], openmetrics: bool = False) -> str:
    """The exposition text of ``families`` in OpenMetrics 1.0 or text 0.0.4."""
    out: list[str] = []
    for fam in families:
        sample_name = fam.sample_name
        if openmetrics:
            head = fam.name
            out.append(f"# TYPE {head} {fam.type}\n")
            if fam.unit:
                out.append(f"# UNIT {head} {fam.unit}\n")
            out.append(f"# HELP {head} {_escape_help(fam.help, True)}\n")
        else:
            t = fam.type if fam.type in (COUNTER, GAUGE) else (GAUGE if fam.type == INFO else "untyped")
            out.append(f"# HELP {sample_name} {_escape_help(fam.help, False)}\n")
            out.append(f"# TYPE {sample_name} {t}\n")
        for labels, value in fam.samples:
            out.append(f"{sample_name}{_labels(labels)} {format_value(value)}\n")
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out)


def _media_ranges(accept: str) -> list[tuple[str, dict[str, str], float]]:
    ranges = []
    for part in accept.split(","):
        bits = [b.strip() for b in part.split(";")]
        if not bits[0]:
            continue
        params: dict[str, str] = {}
        for b in bits[1:]:
            if "=" in b:
                k, v = b.split("=", 1)
                params[k.strip().lower()] = v.strip().strip('"')
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 0.0
        ranges.append((bits[0].lower(), params, q))
    return ranges


def negotiate(accept: str | None) -> bool:
    """True when the ``Accept`` header prefers OpenMetrics 1.0 (what Prometheus
    sends: ``application/openmetrics-text;version=1.0.0,...;q=0.5,text/plain;version=0.0.4;q=0.4``).
    An OpenMetrics version other than 1.0.x falls back to the text format."""
    if not accept:
        return False
    best_om = best_text = -1.0
    for media, params, q in _media_ranges(accept):
        if media == "application/openmetrics-text":
            if params.get("version", "1.0.0").startswith("1.0") and q > best_om:
                best_om = q
        elif media in ("text/plain", "text/*", "*/*") and q > best_text:
            best_text = q
    return best_om > 0 and best_om >= best_text


def sort_families(families: Sequence[MetricFamily]) -> list[MetricFamily]:
    """Families in name order (so diffs of two scrapes are readable)."""
    return sorted(families, key=lambda f: f.name)
