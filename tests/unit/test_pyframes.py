"""Python frames for CPython <= 3.11 (``pmuscope._pyperf``) and the start-up
bootstrap ``record``/``profile`` give a command: the helper loads, gives each
Python function one executable trampoline named in /tmp/perf-PID.map exactly
as CPython 3.12's ``-X perf`` names it (``py::QUALNAME:FILE``), a forked child
writes its own map, and nothing happens when switched off.

These run child interpreters (``sys.executable``) and need no perf events."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from pmuscope.sampling import pyframes

HOOKED = sys.implementation.name == "cpython" and sys.version_info < (3, 12)
needs_helper = pytest.mark.skipif(
    not HOOKED or pyframes.helper_path() is None,
    reason="pmuscope._pyperf serves CPython <= 3.11 and is built only with a C compiler",
)

#: the child: runs distinct functions, then reports its pid and which of its
#: map's addresses lie in executable mappings
CHILD = textwrap.dedent("""
    import json, os, sys

    def leaf(n):
        return n + 1

    def middle(n):
        return leaf(n) + leaf(n + 1)

    class Box:
        def method(self):
            return middle(3)

    def check_map(pid):
        spans = []
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                a, perms = line.split()[:2]
                lo, hi = (int(x, 16) for x in a.split("-"))
                if "x" in perms:
                    spans.append((lo, hi))
        path = f"/tmp/perf-{pid}.map"
        rows = []
        if os.path.exists(path):
            for line in open(path):
                start, size, name = line.rstrip("\\n").split(" ", 2)
                start, size = int(start, 16), int(size, 16)
                rows.append([start, size, name, any(lo <= start and start + size <= hi for lo, hi in spans)])
        return rows

    Box().method()
    if len(sys.argv) > 1 and sys.argv[1] == "fork":
        pid = os.fork()
        if pid == 0:
            def only_in_child():
                return leaf(1)
            only_in_child()
            with open(sys.argv[2], "w") as f:
                json.dump({"pid": os.getpid(), "rows": check_map(os.getpid())}, f)
            os._exit(0)
        os.waitpid(pid, 0)
    print(json.dumps({"pid": os.getpid(), "rows": check_map(os.getpid())}))
""")


def _run_child(tmp_path, env, *args):
    script = tmp_path / "child_prog.py"
    script.write_text(CHILD)
    r = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out, str(script), r


def _cleanup(*pids):
    for pid in pids:
        try:
            os.unlink(f"/tmp/perf-{pid}.map")
        except OSError:
            pass


@needs_helper
def test_one_executable_trampoline_per_function(tmp_path):
    out, script, _ = _run_child(tmp_path, pyframes.child_env())
    _cleanup(out["pid"])
    rows = out["rows"]
    assert rows, "no /tmp/perf-PID.map written"
    names = [r[2] for r in rows]
    mine = [n for n in names if n.endswith(":" + script)]
    # one line per function called (the module body too), named as -X perf names them
    assert sorted(mine) == sorted(f"py::{q}:{script}" for q in ("<module>", "leaf", "middle", "Box", "Box.method",
                                                                "check_map", "check_map.<locals>.<genexpr>",
                                                                "check_map.<locals>.<genexpr>"))  # two of them
    starts = [r[0] for r in rows]
    assert len(starts) == len(set(starts)), "two functions share a trampoline"
    assert all(r[1] > 0 for r in rows)
    assert all(r[3] for r in rows), [r for r in rows if not r[3]][:3]  # inside an executable mapping


@needs_helper
def test_forked_child_writes_its_own_map(tmp_path):
    child_json = tmp_path / "child.json"
    out, script, _ = _run_child(tmp_path, pyframes.child_env(), "fork", str(child_json))
    child = json.loads(child_json.read_text())
    _cleanup(out["pid"], child["pid"])
    parent_names = {r[2] for r in out["rows"]}
    child_names = {r[2] for r in child["rows"]}
    assert child["pid"] != out["pid"]
    # the child's map starts with everything inherited, then adds its own functions
    assert f"py::Box.method:{script}" in child_names
    assert f"py::only_in_child:{script}" in child_names
    assert f"py::only_in_child:{script}" not in parent_names  # not in the parent's map
    by_name = {r[2]: r[0] for r in out["rows"]}
    for r in child["rows"]:
        if r[2] in {f"py::{q}:{script}" for q in ("leaf", "middle", "Box", "Box.method")}:  # made before the fork
            assert by_name[r[2]] == r[0]  # inherited trampolines keep their addresses
    assert all(r[3] for r in child["rows"])


@needs_helper
def test_switched_off_writes_nothing(tmp_path):
    env = pyframes.child_env()
    env.pop(pyframes.ENV_FLAG)
    out, _, _ = _run_child(tmp_path, env)
    assert out["rows"] == []


def test_child_env_prepends_the_bootstrap_once():
    env = pyframes.child_env({"PYTHONPATH": "/a:/b", "PATH": "/bin"})
    assert env["PYTHONPATH"] == os.pathsep.join([pyframes.BOOT_DIR, "/a", "/b"])
    assert env[pyframes.ENV_FLAG] == "1" and env["PYTHONPERFSUPPORT"] == "1" and env["PATH"] == "/bin"
    again = pyframes.child_env(env)
    assert again["PYTHONPATH"] == env["PYTHONPATH"]
    assert pyframes.child_env({})["PYTHONPATH"] == pyframes.BOOT_DIR
    assert os.path.isfile(os.path.join(pyframes.BOOT_DIR, "sitecustomize.py"))


def test_bootstrap_chains_to_the_users_sitecustomize(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIR_SITECUSTOMIZE'] = 'ran'\n")
    env = pyframes.child_env()
    env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + str(theirs)
    code = ("import os, sys, sitecustomize; print(os.environ.get('THEIR_SITECUSTOMIZE'), "
            "sitecustomize.__file__, any('pyboot' in p for p in sys.path))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ran, path, boot_on_path = r.stdout.split()
    assert ran == "ran" and path == str(theirs / "sitecustomize.py") and boot_on_path == "False"


def test_a_helper_that_does_not_load_is_skipped_quietly(tmp_path):
    """Another interpreter's build (or a broken file) where the helper should
    be: the command runs as without pmuscope, and says nothing."""
    import importlib.machinery

    pkg = tmp_path / "pmuscope"
    shutil.copytree(pyframes.BOOT_DIR, pkg / "data" / "pyboot")
    (pkg / ("_pyperf" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"\x7fELF not really")
    env = dict(os.environ, PYTHONPATH=str(pkg / "data" / "pyboot"), PMUSCOPE_PYTHON_FRAMES="1")
    r = subprocess.run([sys.executable, "-c", "import os; print(os.path.exists(f'/tmp/perf-{os.getpid()}.map'))"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False" and r.stderr == ""


@needs_helper
def test_helper_refuses_a_map_it_does_not_own(tmp_path):
    """A perf-PID.map planted as a symlink is not written through."""
    victim = tmp_path / "victim"
    victim.write_text("")
    code = textwrap.dedent(f"""
        import os, importlib.machinery, importlib.util
        path = {pyframes.helper_path()!r}
        loader = importlib.machinery.ExtensionFileLoader("pmuscope._pyperf", path)
        mod = importlib.util.module_from_spec(importlib.util.spec_from_file_location("pmuscope._pyperf", path, loader=loader))
        loader.exec_module(mod)
        os.symlink({str(victim)!r}, {str(tmp_path)!r} + f"/perf-{{os.getpid()}}.map")
        try:
            mod.activate(map_dir={str(tmp_path)!r})
        except OSError as err:
            print("refused", err.errno)
        else:
            print("activated", mod.stats())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("refused"), r.stdout
    assert victim.read_text() == ""


def _fake_proc(tmp_path, pid, exe, maps=""):
    d = tmp_path / "proc" / str(pid)
    d.mkdir(parents=True)
    os.symlink(exe, d / "exe")
    (d / "maps").write_text(maps)
    return str(tmp_path / "proc")


def test_attach_note(tmp_path):
    tmp_dir = tmp_path / "tmp"
    tmp_dir.mkdir()
    proc = _fake_proc(tmp_path, 11, "/usr/bin/python3.11")
    note = pyframes.attach_note(11, proc, str(tmp_dir))
    assert note and "Python 3.11" in note and "already running" in note
    proc = _fake_proc(tmp_path, 12, "/usr/local/bin/python3.12")
    assert "sys.activate_stack_trampoline('perf')" in pyframes.attach_note(12, proc, str(tmp_dir))
    # an embedding program: the version comes from the libpython it maps
    proc = _fake_proc(tmp_path, 13, "/usr/bin/myapp",
                      "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/libpython3.10.so.1.0\n")
    assert "Python 3.10" in pyframes.attach_note(13, proc, str(tmp_dir))
    proc = _fake_proc(tmp_path, 14, "/usr/bin/bash")
    assert pyframes.attach_note(14, proc, str(tmp_dir)) is None  # not Python: nothing to say
    (tmp_dir / "perf-11.map").write_text("")
    assert pyframes.attach_note(11, proc, str(tmp_dir)) is None  # a map: its functions are named


@pytest.mark.parametrize("command", ["record", "profile"])
@pytest.mark.parametrize("flag", [[], ["--no-python-frames"]], ids=["default", "opt-out"])
def test_cli_passes_python_frames(monkeypatch, command, flag):
    import pmuscope.sampling as sampling
    from pmuscope.cli import main as cli

    seen = {}

    class Stop(Exception):
        pass

    class FakeRecorder:
        def __init__(self, *a, **kw):
            seen.update(kw)
            raise Stop

    monkeypatch.setattr(sampling, "Recorder", FakeRecorder)
    with pytest.raises(Stop):
        cli.main([command, *flag, "-o", os.devnull if command == "record" else "/tmp/x", "--", "true"])
    assert seen["python_frames"] is (not flag)


def test_is_python_command(tmp_path):
    script = tmp_path / "tool"
    script.write_text("#!/usr/bin/env python3\nprint(1)\n")
    script.chmod(0o755)
    shell = tmp_path / "run.sh"
    shell.write_text("#!/bin/sh\necho\n")
    assert pyframes.is_python_command([sys.executable, "-c", "1"])
    assert pyframes.is_python_command(["python3.11", "x.py"])
    assert pyframes.is_python_command([str(script)])
    assert not pyframes.is_python_command([str(shell)])
    assert not pyframes.is_python_command(["true"])
    assert not pyframes.is_python_command([str(tmp_path / "missing")])


@needs_helper
def test_threads_and_a_stale_map(tmp_path):
    """Functions run by other threads are named too; a map left by an earlier
    process with the same pid is emptied at start-up."""
    code = textwrap.dedent("""
        import os, threading
        def in_thread():
            return 1
        t = threading.Thread(target=in_thread)
        t.start(); t.join()
        print(os.getpid())
        print(open(f"/tmp/perf-{os.getpid()}.map").read())
    """)
    # the child's pid is not known before it starts: plant the stale line from its parent, a shell
    sh = f'printf "1000 10 py::stale:old.py\\n" > /tmp/perf-$$.map; exec "{sys.executable}" -c \'{code}\''
    r = subprocess.run(["sh", "-c", sh], env=pyframes.child_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    pid, text = r.stdout.split("\n", 1)
    _cleanup(int(pid))
    assert "py::in_thread:<string>" in text
    assert "py::stale:" not in text


def test_missing_helper_note(monkeypatch):
    monkeypatch.setattr(pyframes, "helper_path", lambda: None)
    note = pyframes.missing_helper_note([sys.executable, "x.py"])
    if sys.implementation.name == "cpython" and sys.version_info < (3, 12):
        assert note and "pmuscope._pyperf was not built" in note
    else:
        assert note is None
    assert pyframes.missing_helper_note(["true"]) is None


needs_jitdump = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the helper writes jitdumps on x86-64 only")


@needs_helper
@needs_jitdump
def test_jitdump_names_the_same_functions_as_the_map(tmp_path):
    """With jitdump=True the helper writes /tmp/jit-PID.dump: one unwinding-info
    record and one code load per trampoline, at the map's addresses and under
    its names; a forked child writes its own, with what it inherited."""
    from pmuscope.symbols import parse_jitdump

    child_json = tmp_path / "child.json"
    out, script, _ = _run_child(tmp_path, pyframes.child_env(jitdump=True), "fork", str(child_json))
    child = json.loads(child_json.read_text())
    try:
        for who in (out, child):
            dump = parse_jitdump(open(f"/tmp/jit-{who['pid']}.dump", "rb").read())
            assert dump.pid == who["pid"] and dump.elf_mach == 62 and not dump.truncated
            by_addr = {}
            for line in open(f"/tmp/perf-{who['pid']}.map"):  # as it stands at exit
                start, _, name = line.rstrip("\n").split(" ", 2)
                by_addr[int(start, 16)] = name
            loads = {ld.code_addr: ld for ld in dump.loads}
            assert set(loads) == set(by_addr)
            for addr, ld in loads.items():
                assert ld.name == by_addr[addr] and ld.vma == addr and ld.pid == who["pid"]
                assert ld.code[:8] == bytes.fromhex("554889e5ffd15dc3")  # push rbp; mov rsp,rbp; call *rcx; pop; ret
                assert ld.unwinding and ld.eh_frame_hdr_size == 20
            assert len({ld.code for ld in dump.loads}) == len(dump.loads)  # distinct bytes: distinct build-ids
            starts = sorted(loads)
            assert min(b - a for a, b in zip(starts, starts[1:])) >= 128  # room for perf inject's unwind info
        assert f"py::only_in_child:{script}" in {ld.name for ld in parse_jitdump(
            open(f"/tmp/jit-{child['pid']}.dump", "rb").read()).loads}
    finally:
        _cleanup(out["pid"], child["pid"])
        for pid in (out["pid"], child["pid"]):
            try:
                os.unlink(f"/tmp/jit-{pid}.dump")
            except OSError:
                pass


def test_parse_jitdump_rejects_and_truncates():
    import struct

    from pmuscope.errors import FormatError
    from pmuscope.symbols import parse_jitdump

    head = struct.pack("<IIIIIIQQ", 0x4A695444, 1, 40, 62, 0, 77, 1, 0)
    name = b"py::f:x.py\0"
    load = struct.pack("<IIQ", 0, 16 + 40 + len(name) + 4, 5) + struct.pack("<IIQQQQ", 77, 77, 0x1000, 0x1000, 4, 1)
    load += name + b"\x90" * 4
    d = parse_jitdump(head + load)
    assert [(x.code_addr, x.code_size, x.name, x.code) for x in d.loads] == [(0x1000, 4, "py::f:x.py", b"\x90" * 4)]
    assert not d.truncated
    assert parse_jitdump(head + load[:-2]).truncated  # the writer is still at it
    with pytest.raises(FormatError):
        parse_jitdump(b"\0" * 40)
    with pytest.raises(FormatError):
        parse_jitdump(head[:10])


def test_symbolizer_reads_a_jitdump_when_there_is_no_perf_map(tmp_path):
    import struct

    import numpy as np

    from pmuscope.symbols import Symbolizer

    head = struct.pack("<IIIIIIQQ", 0x4A695444, 1, 40, 62, 0, 4242, 1, 0)
    name = b"py::g:y.py\0"
    load = struct.pack("<IIQ", 0, 16 + 40 + len(name) + 8, 5) + struct.pack("<IIQQQQ", 4242, 4242, 0x7000, 0x7000, 8, 1)
    (tmp_path / "jit-4242.dump").write_bytes(head + load + name + b"\xcc" * 8)
    sym = Symbolizer(tmp_dir=str(tmp_path), use_proc_maps=False)
    r = sym.resolve_many(np.array([4242, 4242]), np.array([0x7004, 0x9000], dtype=np.uint64))
    assert sym.sym_name(int(r.sym_id[0])) == "py::g:y.py" and int(r.offset[0]) == 4
    assert int(r.sym_id[1]) == -1


@pytest.mark.parametrize("text,clock", [("monotonic", 1), ("mono", 1), ("CLOCK_MONOTONIC_RAW", 4), ("realtime", 0),
                                        ("boottime", 7), ("tai", 11), ("1", 1), (None, None)])
def test_record_clockid(monkeypatch, text, clock):
    """record -k: sample times from a clock (perf record -k); the Recorder
    asks each event for it (use_clockid), and with CLOCK_MONOTONIC a Python
    command also writes a jitdump for perf inject --jit."""
    import pmuscope.sampling as sampling
    from pmuscope.cli import main as cli

    seen = {}

    class Stop(Exception):
        pass

    def fake(*a, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(sampling, "Recorder", fake)
    with pytest.raises(Stop):
        cli.main(["record", *(["-k", text] if text else []), "-o", os.devnull, "--", "true"])
    assert seen["clockid"] == clock


def test_record_clockid_rejects_unknown():
    from pmuscope.cli import main as cli

    assert cli.main(["record", "-k", "sundial", "-o", os.devnull, "--", "true"]) != 0


def test_recorder_sets_use_clockid_and_jitdump(monkeypatch):
    import time

    from pmuscope.counting import workload as wl
    from pmuscope.sampling import Recorder

    rec = Recorder("cpu-clock", cmd=["true"], output=None, clockid=time.CLOCK_MONOTONIC, python_frames=True)
    assert all(a.use_clockid == 1 and a.clockid == time.CLOCK_MONOTONIC for a in rec.attrs)
    envs = []

    class FakeWorkload:
        def __init__(self, argv, env=None):
            envs.append(env)
            raise RuntimeError("stop")

    monkeypatch.setattr(wl, "Workload", FakeWorkload)
    with pytest.raises(RuntimeError):
        rec.start()
    assert envs[0][pyframes.ENV_JITDUMP] == "1" and envs[0][pyframes.ENV_FLAG] == "1"
    plain = Recorder("cpu-clock", cmd=["true"], output=None)
    assert all(a.use_clockid == 0 for a in plain.attrs)
