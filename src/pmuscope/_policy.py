"""Process-wide reading policy, set by the command line.

``STRICT_READS``: what ``PerfDataFile(strict=None)`` means. The library's
default is strict (any malformed byte raises :class:`~pmuscope.errors.FormatError`);
the ``pmuscope`` commands read like perf instead — a damaged optional header
section or trailing bytes are skipped with a warning and the samples are read.
"""

STRICT_READS = True
