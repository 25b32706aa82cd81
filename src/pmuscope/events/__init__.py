"""Event strings → EventSpec (a complete perf_event_attr + name), the way perf parses them."""

from .spec import EventSpec

__all__ = ["EventSpec"]
