"""Build the optional native helpers.

- ``pmuscope._native``: rdtsc/rdpmc, native sampling loop, counter reads.
- ``pmuscope._pyperf``: Python function names for perf on CPython <= 3.11
  (per-function trampolines through the PEP 523 frame-evaluation hook, and
  /tmp/perf-PID.map); it builds on newer interpreters too and reports itself
  unsupported there (they have ``-X perf``).

`optional=True`: when no C compiler is present the install still succeeds and
pmuscope uses its pure-Python paths (`pmuscope doctor` / `observe --explain`
say which path is active); without ``_pyperf`` Python frames on 3.11 are not named.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("pmuscope._native", ["src/pmuscope/_native.c"], optional=True, extra_compile_args=["-O2"]),
        Extension("pmuscope._pyperf", ["src/pmuscope/_pyperf.c"], optional=True, extra_compile_args=["-O2"]),
    ]
)
