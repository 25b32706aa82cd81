"""Build the optional native helper (rdtsc/rdpmc, native sampling loop, counter reads).

`optional=True`: when no C compiler is present the install still succeeds and
pmuscope uses its pure-Python paths (`pmuscope doctor` / `observe --explain`
say which path is active).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("pmuscope._native", ["src/pmuscope/_native.c"], optional=True, extra_compile_args=["-O2"]),
    ]
)
