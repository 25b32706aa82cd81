"""Build the tiny test binaries for pmuscope.symbols tests with gcc/g++ and
binutils (used by tests/unit/test_symbols_*.py and tests/live/test_symbols_*.py).

``build(out_dir)`` returns a dict of paths, or raises ``Unavailable`` naming the
missing tool.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Unavailable(Exception):
    pass


def _run(*cmd, cwd=None):
    subprocess.run(cmd, check=True, capture_output=True, timeout=120, cwd=cwd)


def build(out: Path) -> dict[str, Path]:
    for tool in ("gcc", "g++", "objcopy", "readelf", "nm"):
        if shutil.which(tool) is None:
            raise Unavailable(f"{tool} is not installed")
    out.mkdir(parents=True, exist_ok=True)
    p = {name: out / name for name in (
        "demo_pie", "demo_nopie", "demo_lib", "libsymdemo.so", "demo_cxx", "demo_stripped",
        "demo.debug", "demo_bid_stripped")}
    src, lib_src, cxx_src = HERE / "demo.c", HERE / "symdemo_lib.c", HERE / "demo.cpp"
    common = ["-O1", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id=sha1"]
    _run("gcc", *common, "-fPIE", "-pie", "-o", str(p["demo_pie"]), str(src))
    _run("gcc", *common, "-fno-pie", "-no-pie", "-o", str(p["demo_nopie"]), str(src))
    _run("gcc", *common, "-fPIC", "-shared", "-o", str(p["libsymdemo.so"]), str(lib_src))
    _run("gcc", *common, "-fPIE", "-pie", "-DWITH_LIB", "-o", str(p["demo_lib"]), str(src),
         f"-L{out}", "-lsymdemo", f"-Wl,-rpath,{out}")
    _run("g++", *common, "-o", str(p["demo_cxx"]), str(cxx_src))
    # stripped binary + separate debug file found through .gnu_debuglink
    _run("objcopy", "--only-keep-debug", str(p["demo_pie"]), str(p["demo.debug"]))
    _run("objcopy", "--strip-all", str(p["demo_pie"]), str(p["demo_stripped"]))
    _run("objcopy", f"--add-gnu-debuglink={p['demo.debug'].name}", p["demo_stripped"].name,
         cwd=str(out))
    # stripped, no debuglink: only the build-id leads to the debug file
    _run("objcopy", "--strip-all", str(p["demo_nopie"]), str(p["demo_bid_stripped"]))
    p["debug_root"] = out / "debugroot"
    bid = build_id(p["demo_nopie"])
    dest = p["debug_root"] / ".build-id" / bid[:2] / (bid[2:] + ".debug")
    dest.parent.mkdir(parents=True, exist_ok=True)
    _run("objcopy", "--only-keep-debug", str(p["demo_nopie"]), str(dest))
    return p


def build_id(path: Path) -> str:
    out = subprocess.run(["readelf", "-n", str(path)], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    for line in out.splitlines():
        if "Build ID:" in line:
            return line.split("Build ID:")[1].strip()
    raise Unavailable(f"{path} has no build-id")


_CACHE: dict = {}


def cached(tmp_path_factory) -> dict[str, Path]:
    """Build once per test session (shared by every test module that asks)."""
    if "paths" not in _CACHE:
        try:
            _CACHE["paths"] = build(tmp_path_factory.mktemp("symbols_bin"))
        except Unavailable as err:
            _CACHE["paths"] = err
        except subprocess.CalledProcessError as err:
            _CACHE["paths"] = Unavailable(f"compiling the test binaries failed: "
                                          f"{err.stderr.decode(errors='replace')[:300]}")
    if isinstance(_CACHE["paths"], Exception):
        raise _CACHE["paths"]
    return _CACHE["paths"]

