"""The profile builder's C walk and frame cache (``_native.resolve_round``) and
the C collapser (``collapse_add``) against the numpy path
(``PMUSCOPE_NATIVE_RESOLVE=0``, the reference): the same profiles (frame ids,
comms, stacks) and the same bytes from ``report``, ``script`` and ``export``
on every perf.data file in tests/data."""

from __future__ import annotations

import numpy as np
import pytest

from pmuscope import _policy
from pmuscope.cli.main import main as cli_main
from pmuscope.kernel import abi
from pmuscope.profile import model
from pmuscope.profile.model import _Pending, iter_profile_chunks, join_chunks, load_profile

from .test_profile_stream import COLUMNS, CORPUS, _errors, _id, _whole

native = pytest.importorskip("pmuscope._native")
if not hasattr(native, "resolve_round"):
    pytest.skip("pmuscope._native without resolve_round (an older build)", allow_module_level=True)


def _path(monkeypatch, native_on: bool) -> None:
    monkeypatch.setenv("PMUSCOPE_NATIVE_RESOLVE", "1" if native_on else "0")


def test_the_switch_picks_the_path(monkeypatch):
    _path(monkeypatch, False)
    assert model._native_resolve() is None
    assert model.ProfileBuilder([])._ncache is None
    _path(monkeypatch, True)
    assert model._native_resolve() is native
    assert model.ProfileBuilder([])._ncache is not None


def _same_profile(a, b):
    for name in COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.comms == b.comms


@pytest.mark.parametrize("path", CORPUS, ids=_id)
def test_profiles_are_the_numpy_paths(path, monkeypatch):
    _path(monkeypatch, False)
    ref, err = _whole(path, keep_raw=True)
    _path(monkeypatch, True)
    got, err2 = _whole(path, keep_raw=True)
    assert err == err2
    if err is None:
        _same_profile(got, ref)
        # chunk by chunk, and rounds resolved together
        for kw in ({"chunk_samples": 7}, {"chunk_samples": 64, "round_samples": 50}):
            _path(monkeypatch, True)
            a = join_chunks(list(iter_profile_chunks(path, kernel_symbols=False, **kw)))
            _path(monkeypatch, False)
            b = join_chunks(list(iter_profile_chunks(path, kernel_symbols=False, **kw)))
            _same_profile(a, b)


COMMANDS = [["report", "--stdio"], ["report", "--json"], ["report", "--stdio", "--sort", "pid,cpu,sym", "-g", "caller"],
            ["report", "--stdio", "--sort", "tid,dso", "--no-children"], ["script"], ["script", "-G"],
            ["export", "-o", "-", "-f", "pprof"], ["export", "-o", "-", "-f", "folded"]]


@pytest.mark.parametrize("path", CORPUS, ids=_id)
@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_commands_print_the_numpy_paths_bytes(path, argv, capsysbinary, monkeypatch):
    monkeypatch.setattr(model, "CHUNK_SAMPLES", 3)  # many chunks: rows and chains merged across them
    outs = []
    for on in (False, True):
        _path(monkeypatch, on)
        monkeypatch.setattr(_policy, "STRICT_READS", False)
        rc = cli_main([argv[0], "-i", path, "--no-kernel-symbols", *argv[1:]])
        out, err = capsysbinary.readouterr()
        outs.append((rc, out, _errors(err)))
    assert outs[1] == outs[0]


U = np.uint64
CTX = {name: int(getattr(abi, f"PERF_CONTEXT_{name}")) for name in ("HV", "KERNEL", "USER", "GUEST_KERNEL",
                                                                      "GUEST_USER")}


def _round(rng, n, pids):
    """Samples of a made-up round: user, kernel and odd leaves; chains with every
    context marker, junk (>= 2^56) and odd ([2^48, 2^56)) user addresses, repeats."""
    ips = rng.choice(np.array([0x401000, 0x401010, 0x7F0000001000, 0xFFFFFFFF81000000, 0xFFFFFFFF81000040,
                               0x1000000000000, 0xDFDFDFDF00000000, 0x0], dtype=U), n)
    mode = rng.choice(np.array([1, 2, 3, 4, 5, 0, 6], dtype=np.uint8), n)
    pid = rng.choice(np.array(pids, dtype=np.int64), n)
    chains, off = [], [0]
    pool = [0x401000, 0x401234, 0x402000, 0x7F0000002000, 0xFFFFFFFF81000000, 0xFFFFFFFF81001000,
            0x1000000000010, 0xDFDFDFDF00000000, 0xE0E0E0E000000000, *CTX.values(), int(abi.PERF_CONTEXT_MAX)]
    for _ in range(n):
        k = int(rng.integers(0, 9))
        chains.extend(int(x) for x in rng.choice(np.array(pool, dtype=U), k))
        off.append(len(chains))
    cols = {"pid": pid, "tid": pid.copy(), "cpu": np.zeros(n, np.int32), "time": np.arange(n, dtype=U),
            "period": np.ones(n, U), "event": np.zeros(n, np.int16), "ip": ips, "cpumode": mode,
            "comm": np.zeros(n, np.int32)}
    return _Pending(cols, {"cc": (np.array(chains, dtype=U), np.array(off, dtype=np.int64))})


def test_rounds_of_odd_addresses_get_the_numpy_paths_frames(monkeypatch):
    builders = []
    for on in (False, True):
        _path(monkeypatch, on)
        b = model.ProfileBuilder([])
        b.has_callchain = True
        assert (b._ncache is not None) == on
        builders.append(b)
    for seed in range(12):
        for b in builders:
            rng = np.random.default_rng(seed)
            b._resolve(_round(rng, 40, [1, 2, 3, -1] if seed % 2 else [7, 2]))
            if seed == 5:  # a KSYMBOL: kernel frames start over
                b._kepoch += 1
            if seed == 8:  # pid 2's maps changed
                b._epoch[2] = b._epoch.get(2, 0) + 1
                if b._ncache is not None:
                    b._nat.resolve_cache_forget_pid(b._ncache, 2)
    ref, got = (b.pop_chunk() for b in builders)
    _same_profile(got, ref)
    assert len(ref.frame_ip) > 20 and len(ref.stack) > 100


def test_space_ids_starting_over_mid_round_give_the_numpy_paths_frames(monkeypatch):
    # every pid its own address space (no maps); the space ids run out and start over
    # in the middle of a round (0xFFFF of them): the frame ids stay the numpy path's
    profs = []
    for on in (False, True):
        _path(monkeypatch, on)
        b = model.ProfileBuilder([])
        b.has_callchain = True
        b._sid_of_fp.update({("filler", i): i + 1 for i in range(0xFFFF - 3)})
        for r in range(3):
            rng = np.random.default_rng(r)
            b._resolve(_round(rng, 30, [10 * r + k for k in range(6)]))
        profs.append(b.pop_chunk())
    _same_profile(profs[1], profs[0])


def test_a_bad_round_is_refused(monkeypatch):
    cache = native.resolve_cache_new()
    ip = np.zeros(2, U)
    with pytest.raises(ValueError):
        native.resolve_round(cache, ip, np.zeros(2, np.uint8), np.zeros(2, np.int64), np.zeros(1, U),
                             np.array([0, 2, 1], np.int64), np.zeros(3, np.int32), np.zeros(2, np.int64),
                             lambda p: [], lambda k, p, i: None)
    # a callback's error comes out as is
    def boom(kind, pids, ips):
        raise RuntimeError("symbolizer failed")
    with pytest.raises(RuntimeError, match="symbolizer failed"):
        native.resolve_round(cache, ip, np.full(2, 1, np.uint8), np.zeros(2, np.int64), np.zeros(0, U),
                             np.zeros(3, np.int64), np.zeros(2, np.int32), np.zeros(2, np.int64),
                             lambda p: [], boom)


def test_collapsed_rows_are_the_numpy_paths(monkeypatch):
    from pmuscope.profile.collapse import KEYS, Collapser

    path = next(p for p in CORPUS if "perf-g-small" in p)
    monkeypatch.setattr(_policy, "STRICT_READS", False)
    for keep in (KEYS, ("event", "comm", "leaf", "chain"), ("event", "leaf")):
        profs = []
        for on in (False, True):
            _path(monkeypatch, on)
            col = Collapser(keep)
            assert (col._ncol is not None) == on
            for c in iter_profile_chunks(path, kernel_symbols=False, chunk_samples=5):
                col.add(c)
            profs.append(col.profile())
        a, b = profs
        for name in COLUMNS[:-6] + ("count",):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (keep, name)
        assert getattr(a, "time").dtype == getattr(b, "time").dtype


def test_final_rows_are_handed_over_not_copied(monkeypatch):
    """profile(final=True) takes the C collapser's memory (no copy of the rows): the same
    profile as a profile() that leaves the state alive, the arrays outlive the collapser,
    and the state takes no more chunks; with tid among the keys no separate tid is kept."""
    import gc
    import weakref

    from pmuscope.profile.collapse import KEYS, Collapser

    path = next(p for p in CORPUS if "perf-g-small" in p)
    monkeypatch.setattr(_policy, "STRICT_READS", False)
    _path(monkeypatch, True)
    for keep in (KEYS, ("event", "comm", "leaf", "chain")):
        chunks = list(iter_profile_chunks(path, kernel_symbols=False, chunk_samples=5))
        col = Collapser(keep)
        assert col._keep_tid == ("tid" not in keep)
        for c in chunks:
            col.add(c)
        kept = col.profile()  # the state lives on: copies
        col2 = Collapser(keep)
        for c in chunks:
            col2.add(c)
        state = col2._ncol
        final = col2.profile(final=True)
        assert col2._ncol is None
        with pytest.raises(ValueError, match="taken"):
            native.collapse_add(state, np.zeros((0, len(col2._nkeys)), dtype=np.int64), None,
                                np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint64), None,
                                np.zeros(0, dtype=np.uint64))
        with pytest.raises(ValueError, match="taken"):
            native.collapse_result(state)
        owner = final.period
        while not isinstance(owner, native.OwnedBuffer) and getattr(owner, "base", None) is not None:
            owner = owner.base
        assert isinstance(owner, native.OwnedBuffer), type(owner)
        ref = weakref.ref(col2)
        del col2, state
        gc.collect()
        assert ref() is None
        for name in COLUMNS[:-6] + ("count",):
            assert np.array_equal(getattr(kept, name), getattr(final, name)), (keep, name)
        final.period[:] += 0  # writable, as the copies were


def test_load_profile_without_native(monkeypatch):
    path = next(p for p in CORPUS if "perf-g-small" in p)
    _path(monkeypatch, True)
    a = load_profile(path, kernel_symbols=False)
    monkeypatch.setattr(model, "_native_resolve", lambda: None)  # no compiler: the numpy path
    b = load_profile(path, kernel_symbols=False)
    _same_profile(a, b)


def test_chain_hash_multipliers_are_numpy_randoms_draw():
    # kept as bytes so that a report need not import numpy.random; the same numbers
    from pmuscope.profile import callchain

    monkey = callchain._MULT
    try:
        callchain._MULT = None
        want = np.random.default_rng(0x9E3779B97F4A7C15).integers(1, 1 << 63, size=256, dtype=np.uint64) * 2 + 1
        got = callchain._multipliers(300)
        assert got.dtype == np.uint64 and np.array_equal(got[:256], want)
        more = np.random.default_rng(300).integers(1, 1 << 63, size=44, dtype=np.uint64) * 2 + 1
        assert np.array_equal(got[256:], more)
    finally:
        callchain._MULT = monkey


def test_take_flat_is_numpys(monkeypatch):
    _path(monkeypatch, True)
    rng = np.random.default_rng(1)
    for _ in range(300):
        n = int(rng.integers(0, 20))
        off = np.zeros(n + 1, np.int64)
        np.cumsum(rng.integers(0, 5, n), out=off[1:])
        flat = rng.integers(0, 100, int(off[-1])).astype(rng.choice([np.int32, np.uint64, np.uint8]))
        sels = [rng.random(n) < 0.5, rng.integers(0, n, int(rng.integers(0, 10))) if n else np.zeros(0, np.int64)]
        for sel in sels:
            a, b = model._take_flat(flat, off, sel), model._take_flat_np(flat, off, sel)
            assert a[0].dtype == b[0].dtype and np.array_equal(a[0], b[0])
            assert a[1].dtype == b[1].dtype and np.array_equal(a[1], b[1])
    # what the C code does not take (a row out of range, a wrong mask) gets numpy's answer or error
    off = np.array([0, 2, 3], np.int64)
    flat = np.arange(3, dtype=np.uint64)
    assert native.take_flat(flat, off, np.array([2], np.int64), False, 8) is None
    with pytest.raises(IndexError):
        model._take_flat(flat, off, np.array([True]))
    assert np.array_equal(model._take_flat(flat, off, np.array([-1]))[0], [2])


def test_an_open_perf_data_file_is_read_straight_from_its_file(tmp_path):
    # export hands iter_profile_chunks an open PerfDataFile: a plain file's data section
    # is cut from the file as for a path; bytes, or a name now naming another file, are not
    from pmuscope.perfdata import PerfDataFile

    path = next(p for p in CORPUS if "perf-g-small" in p)
    with PerfDataFile(path) as pf:
        assert model._plain_path(pf) == path
        a = join_chunks(list(iter_profile_chunks(pf, kernel_symbols=False, chunk_samples=64)))
    _same_profile(a, load_profile(path, kernel_symbols=False))
    with open(path, "rb") as f:
        data = f.read()
    with PerfDataFile(data) as pf:
        assert model._plain_path(pf) is None
    copy = tmp_path / "p.data"
    copy.write_bytes(data)
    with PerfDataFile(str(copy)) as pf:
        copy.unlink()
        copy.write_bytes(b"other")
        assert model._plain_path(pf) is None
