"""open_fallbacks accepts errno 95 by either of its names (errno.errorcode[95] is 'ENOTSUP')."""

import errno

from pmuscope.events.defaults import open_fallbacks
from pmuscope.kernel import perf_event_attr


def test_precise_ip_fallback_for_errno_95_by_any_name():
    attr = perf_event_attr(type=0, config=0, precise_ip=2)
    by_code = open_fallbacks(attr, errno.errorcode[errno.EOPNOTSUPP])
    by_name = open_fallbacks(attr, "EOPNOTSUPP")
    assert [a.precise_ip for _, a in by_code] == [a.precise_ip for _, a in by_name] == [1, 0]
