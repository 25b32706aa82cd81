"""pmuscope._native.CountsReader, the native half of Counter.read(), on fds a unit
test can make (a pipe): it must read as ``os.read`` does and build the Counts that
``Counts.__init__`` builds. Its use by Counter is tested over both read paths in
test_counting.py."""

from __future__ import annotations

import errno
import os
import struct

import pytest

from pmuscope.counting import counter as counter_mod
from pmuscope.counting.results import Counts


def _native_reader(layout, units, read=None):
    return counter_mod._native.CountsReader(Counts, counter_mod._NATIVE_FILL, counter_mod._NATIVE_CLEAR, layout,
                                            units, read)


def _one_event_layout():
    from pmuscope.counting import results

    return results.Layout(names=("a",), units=("",), scales=(1.0,), supported=(True,), errors=(None,), cpus=(-1,),
                          threads=(0,), units_plan=((False, (0,), 0, 0),))


@pytest.fixture
def native_reader_module():
    if not counter_mod.native_read_available():
        pytest.skip("the native helper is not built here (no C compiler at install time)")
    return counter_mod._native


def test_native_reader_reads_like_os_read(native_reader_module):
    layout = _one_event_layout()
    rfd, wfd = os.pipe()
    try:
        os.write(wfd, struct.pack("=4Q", 3, 10, 5, 1) + b"rest")
        reader = _native_reader(layout, ((rfd, 32),))
        assert reader.units == ((rfd, 32),)
        r = reader(123)
        assert r.start_ns == 123 and r["a"].scaled == 6.0 and r._raws == (struct.pack("=4Q", 3, 10, 5, 1),)
        short = reader(0)  # what is there, as os.read returns it
        assert short._raws == (b"rest",)
        os.close(wfd)
        wfd = -1
        assert reader(0)._raws == (b"",)  # end of file
    finally:
        os.close(rfd)
        if wfd >= 0:
            os.close(wfd)
    with pytest.raises(OSError) as err:
        reader(0)  # the fd is closed now
    assert err.value.errno == errno.EBADF


def test_native_reader_checks_its_inputs(native_reader_module):
    layout = _one_event_layout()
    with pytest.raises(TypeError, match="returned str, not bytes"):
        _native_reader(layout, ((5, 32),), lambda fd, size: "no")(0)
    with pytest.raises(ZeroDivisionError):
        _native_reader(layout, ((5, 32),), lambda fd, size: 1 // 0)(0)
    with pytest.raises(TypeError, match="one positional argument"):
        _native_reader(layout, ((5, 32),), lambda fd, size: b"")()

    class Other:  # _raws is not a slot
        __slots__ = ("layout", "timestamp_ns", "start_ns")
        _raws = property(lambda self: None)

    with pytest.raises(TypeError, match="'_raws' is not a __slots__ attribute of Other"):
        native_reader_module.CountsReader(Other, counter_mod._NATIVE_FILL, (), layout, ())
    with pytest.raises(AttributeError):
        native_reader_module.CountsReader(Other, ("layout", "nothing", "timestamp_ns", "start_ns"), (), layout, ())
    with pytest.raises(TypeError, match="units are"):
        _native_reader(layout, (5,))
    with pytest.raises(ValueError, match="named twice"):
        native_reader_module.CountsReader(Counts, counter_mod._NATIVE_FILL, ("_data", "layout"), layout, ())



def test_environment_switches_the_read_path_off():
    import subprocess
    import sys

    code = "from pmuscope.counting import counter; print(counter.NATIVE_READ)"
    env = dict(os.environ)
    for value, expect in (("0", "False"), ("1", "True")):
        env["PMUSCOPE_NATIVE_READ"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expect
