"""File-level helpers behind ``pmuscope export``: load a recording (or folded
stacks) as an :class:`ExportProfile`, write it in a format, push it once."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Callable, Mapping

from .. import errors

if TYPE_CHECKING:
    from .model import ExportProfile

FORMATS = ("pprof", "speedscope", "folded")
DEFAULT_OUTPUT = {"pprof": "perf.pb.gz", "speedscope": "perf.speedscope.json", "folded": "perf.folded"}


def load(path: str, *, input_format: str | None = None, kernel_symbols: bool | None = None,
         select: Callable | None = None, aggregate: bool = True) -> tuple[ExportProfile, str]:
    """Read ``path`` (perf.data, ``-`` for stdin, or folded text when
    ``input_format="folded"`` or the name ends in ``.folded``/``.txt``) →
    ``(ExportProfile, event label)``. ``select`` maps the
    :class:`~pmuscope.profile.Profile` before conversion (filters). Build ids
    come from the file's HEADER_BUILD_ID feature."""
    fmt = input_format or ("folded" if path.endswith((".folded", ".txt")) else "perf.data")
    if fmt == "folded":
        try:
            if path == "-":
                text = sys.stdin.read()
            else:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
        except OSError as err:
            raise errors.PmuscopeError(f"cannot read {path}: {err.strerror}") from None
        except UnicodeDecodeError as err:
            raise errors.FormatError(f"{path}: not folded stacks (byte {err.start} is not UTF-8 text); "
                                     "give a text file of 'frame;frame COUNT' lines, or drop --input-format folded",
                                     path=path, offset=err.start) from None
        from .model import from_folded  # here: the model needs numpy, FORMATS (for `--help`) does not

        return from_folded(text, name=os.path.basename(path)), "samples"
    if fmt != "perf.data":
        raise errors.PmuscopeError(f"unknown input format {fmt!r}: expected perf.data or folded")
    from ..perfdata import Feature, PerfDataFile
    from ..profile import load_profile

    if path != "-" and not os.path.exists(path):
        raise errors.PmuscopeError(f"{path} does not exist: record one with `pmuscope record` or pass -i FILE")
    pf = PerfDataFile(path)
    col = None
    try:
        build_ids = {b.filename: b.hex for b in (pf.parsed_feature(Feature.BUILD_ID) or [])}
        if aggregate and os.environ.get("PMUSCOPE_EXPORT_STREAM", "1") != "0":
            # rows are merged anyway: read the file in chunks, each collapsed to its
            # distinct samples as it comes (memory: the distinct samples, not the file)
            from ..profile import model
            from ..profile.collapse import Collapser

            col = Collapser(("event", "comm", "pid", "tid", "cpu", "leaf", "chain"))
            for chunk in model.iter_profile_chunks(pf, kernel_symbols=kernel_symbols,
                                                   chunk_samples=model.COLLAPSE_CHUNK_SAMPLES):
                col.add(select(chunk) if select is not None else chunk)
                del chunk  # not alive while the next one is built
            # the rows' stacks stay the interned chains (ExportProfile.stack_index): not copied per row
            prof = col.profile(final=True, stacks=False)
        else:  # PMUSCOPE_EXPORT_STREAM=0: the reference, every sample held
            prof = load_profile(pf, kernel_symbols=kernel_symbols)
    finally:
        pf.close()
    if select is not None and col is None:
        prof = select(prof)
    from .model import aggregate_rows, export_rows

    label = ",".join(prof.event_names)
    ep, stack_ids = export_rows(prof, build_ids=build_ids, comments=[f"pmuscope export of {path}"], collapsed=col)
    del prof, col  # the profile's columns that ep does not share go before the merge's temporaries come
    return (aggregate_rows(ep, stack_ids=stack_ids) if aggregate else ep.validate()), label


def weight_column(ep: ExportProfile, event: str | None) -> int:
    """The values column for ``event`` (None: the first event, else samples)."""
    if event is None:
        return 1 if len(ep.sample_types) > 1 else 0
    try:
        return ep.sample_type_index(event)
    except errors.FormatError:
        if event.split(":")[0] in ("cpu-clock", "task-clock"):
            for i, (t, u) in enumerate(ep.sample_types):
                if u == "nanoseconds" and t in ("cpu", event.split(":")[0]):
                    return i
        raise


def render(ep: ExportProfile, fmt: str, *, event: str | None = None) -> bytes | str:
    """``ep`` in ``fmt`` (pprof bytes, speedscope JSON text or folded text)."""
    # each format's module on its own: pprof needs neither json nor the folded helpers
    if fmt == "pprof":
        from . import pprof

        return pprof.dumps(ep)
    if fmt == "speedscope":
        from . import speedscope

        return speedscope.dumps(ep, sample_types=None if event is None else [weight_column(ep, event)])
    if fmt == "folded":
        from ..profile.folded import format_folded

        return format_folded(ep.folded(weight_column(ep, event), comm=True))
    raise errors.PmuscopeError(f"unknown export format {fmt!r}: expected one of {', '.join(FORMATS)}")


def write(ep: ExportProfile, fmt: str, path: str, *, event: str | None = None) -> None:
    """Write ``ep`` in ``fmt`` to ``path`` (``-``: standard output) with the
    rules of :func:`pmuscope.outfile.open_output`; the same bytes as
    :func:`render`. pprof and speedscope are written as they are made."""
    if fmt == "pprof":
        from . import pprof

        pprof.write(ep, path)
        return
    if fmt == "speedscope":
        from . import speedscope

        speedscope.write(ep, path, sample_types=None if event is None else [weight_column(ep, event)])
        return
    from ..outfile import write_output

    write_output(path, render(ep, fmt, event=event))


def push_once(ep: ExportProfile, url: str, app: str = "pmuscope", labels: Mapping[str, str] | None = None, *,
              start: float | None = None, end: float | None = None, timeout: float = 30.0):
    """Push one profile and wait (at most ``timeout`` s) for the outcome;
    returns the :class:`~pmuscope.export.push.PushStats` (``sent == 1`` when
    delivered). ``end`` defaults to now, ``start`` to ``end`` minus the
    profile's duration (at least 1 s)."""
    from .push import PyroscopePusher

    end = time.time() if end is None else end
    if start is None:
        start = end - max(ep.duration_nanos / 1e9, 1.0)
    pusher = PyroscopePusher(url, app, labels, max_queue=1, retries=4, backoff=0.5, timeout=min(10.0, timeout))
    pusher.push(ep, start, end)
    return pusher.close(timeout)
