"""Per-CPU and machine context for counter time series: the features a DVFS
model trains on, read from procfs and sysfs.

Every reader takes the root of the tree it reads (``sysfs="/sys"``,
``procfs="/proc"``) so a fixture tree can stand in for the machine. Readers
keep their files open and re-read them with ``pread(fd, n, 0)``: sysfs and
procfs regenerate an attribute on every read at offset 0, and skipping
``open()``/``close()`` keeps a 1 ms sampling loop cheap.

Readers of things a machine may lack (cpufreq in a VM, hwmon, thermal zones,
powercap, the ``power`` PMU) report what they found through ``available`` /
empty results instead of raising; the monitor then omits or NaN-fills those
columns.

Units follow the kernel documents:
- cpufreq ``scaling_cur_freq`` is in kHz (Documentation/admin-guide/pm/cpufreq.rst);
- thermal zone ``temp`` is in millidegrees Celsius (Documentation/driver-api/thermal/sysfs-api.rst);
- hwmon ``temp*_input`` m°C, ``in*_input`` mV, ``curr*_input`` mA, ``power*_input`` µW,
  ``energy*_input`` µJ (Documentation/hwmon/sysfs-interface.rst);
- powercap ``energy_uj`` µJ, wrapping at ``max_energy_range_uj``
  (Documentation/power/powercap/powercap.rst);
- ``/proc/stat`` CPU times are in USER_HZ ticks (proc(5)).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from ..errors import PmuscopeError
from ..system import cpu_list_arg as parse_cpu_list  # noqa: F401  (re-exported)
from ..system import online_cpus  # noqa: F401  (re-exported)

__all__ = [
    "CpuFreqReader",
    "ProcStatReader",
    "ThermalReader",
    "HwmonReader",
    "PowercapReader",
    "PowerPmuEvent",
    "power_pmu_events",
    "ContextSampler",
    "online_cpus",
    "parse_cpu_list",
]

_BUF = 1 << 16


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _read_int(path: str) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


class _OpenFile:
    """A sysfs/procfs file kept open and re-read from offset 0."""

    __slots__ = ("path", "fd")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def read(self) -> bytes:
        return os.pread(self.fd, _BUF, 0)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _open_or_none(path: str) -> _OpenFile | None:
    try:
        return _OpenFile(path)
    except OSError:
        return None


def _to_float(data: bytes | None) -> float:
    if not data:
        return math.nan
    try:
        return float(data)
    except ValueError:
        return math.nan


# --------------------------------------------------------------------------- cpufreq


class CpuFreqReader:
    """Current frequency and governor of each CPU from
    ``devices/system/cpu/cpuN/cpufreq/``.

    ``scaling_cur_freq`` is used where present (the governor's view, updated
    by intel_pstate/acpi-cpufreq/cppc), else ``cpuinfo_cur_freq`` (the
    hardware's, root-only on most drivers). CPUs without cpufreq (most VMs)
    read as NaN and governor ``""``.
    """

    def __init__(self, cpus: Sequence[int], sysfs: str = "/sys") -> None:
        self.cpus = list(cpus)
        self.sysfs = sysfs
        self._files: list[_OpenFile | None] = []
        self.governors: list[str] = []
        self.min_khz = np.full(len(self.cpus), np.nan)
        self.max_khz = np.full(len(self.cpus), np.nan)
        for i, cpu in enumerate(self.cpus):
            base = os.path.join(sysfs, f"devices/system/cpu/cpu{cpu}/cpufreq")
            f = _open_or_none(os.path.join(base, "scaling_cur_freq")) or _open_or_none(
                os.path.join(base, "cpuinfo_cur_freq")
            )
            self._files.append(f)
            self.governors.append(_read_text(os.path.join(base, "scaling_governor")) or "")
            lo = _read_int(os.path.join(base, "scaling_min_freq"))
            hi = _read_int(os.path.join(base, "scaling_max_freq"))
            if lo is not None:
                self.min_khz[i] = lo
            if hi is not None:
                self.max_khz[i] = hi

    @property
    def available(self) -> bool:
        """True when at least one CPU has a readable frequency."""
        return any(f is not None for f in self._files)

    def read_khz(self, out: np.ndarray | None = None) -> np.ndarray:
        """Current frequency per CPU in kHz (float64, NaN where unknown)."""
        if out is None:
            out = np.empty(len(self.cpus))
        for i, f in enumerate(self._files):
            if f is None:
                out[i] = math.nan
                continue
            try:
                out[i] = _to_float(f.read())
            except OSError:
                out[i] = math.nan
        return out

    def refresh_governors(self) -> list[str]:
        """Re-read ``scaling_governor`` (it changes rarely; not read per interval)."""
        self.governors = [
            _read_text(os.path.join(self.sysfs, f"devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor")) or ""
            for cpu in self.cpus
        ]
        return self.governors

    def close(self) -> None:
        for f in self._files:
            if f is not None:
                f.close()


# --------------------------------------------------------------------------- /proc/stat


#: /proc/stat cpu line fields (proc(5)); guest and guest_nice are already
#: included in user and nice, so they are not added to the total
PROC_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


def parse_proc_stat(data: bytes | str) -> dict[int, np.ndarray]:
    """Parse the ``cpuN`` lines of /proc/stat into {cpu: ticks[10]} (missing
    trailing fields of old kernels read as 0). The aggregate ``cpu`` line is
    returned under key -1."""
    if isinstance(data, bytes):
        data = data.decode("ascii", "replace")
    out: dict[int, np.ndarray] = {}
    for line in data.splitlines():
        if not line.startswith("cpu"):
            if out:
                break  # cpu lines come first
            continue
        parts = line.split()
        name = parts[0]
        cpu = -1 if name == "cpu" else int(name[3:])
        ticks = np.zeros(len(PROC_STAT_FIELDS), dtype=np.int64)
        vals = [int(v) for v in parts[1 : 1 + len(PROC_STAT_FIELDS)]]
        ticks[: len(vals)] = vals
        out[cpu] = ticks
    return out


def busy_idle(ticks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(busy, total) ticks from a [..., 10] array of /proc/stat fields: idle
    time is ``idle + iowait``; guest time is inside user/nice already."""
    total = ticks[..., :8].sum(axis=-1)
    idle = ticks[..., 3] + ticks[..., 4]
    return total - idle, total


class ProcStatReader:
    """CPU utilization per CPU from /proc/stat deltas.

    /proc/stat counts in USER_HZ ticks (usually 10 ms) accumulated at the
    scheduler tick, so utilization over windows shorter than a few ticks is
    quantized; the monitor samples it at its context period, not per 1 ms
    interval.
    """

    def __init__(self, cpus: Sequence[int], procfs: str = "/proc") -> None:
        self.cpus = list(cpus)
        self.path = os.path.join(procfs, "stat")
        try:
            self._file: _OpenFile | None = _OpenFile(self.path)
        except OSError:
            self._file = None
        self._last: np.ndarray | None = None

    @property
    def available(self) -> bool:
        return self._file is not None

    def read_ticks(self) -> np.ndarray:
        """Ticks [ncpus, 10]; a CPU absent from the file (offline) reads zeros."""
        if self._file is None:
            return np.zeros((len(self.cpus), len(PROC_STAT_FIELDS)), dtype=np.int64)
        parsed = parse_proc_stat(self._file.read())
        zero = np.zeros(len(PROC_STAT_FIELDS), dtype=np.int64)
        return np.stack([parsed.get(c, zero) for c in self.cpus])

    def utilization(self) -> np.ndarray:
        """Busy fraction (0..1) per CPU since the previous call; NaN on the first
        call and where no tick elapsed."""
        ticks = self.read_ticks()
        last, self._last = self._last, ticks
        if last is None:
            return np.full(len(self.cpus), np.nan)
        return utilization_between(last, ticks)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def utilization_between(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Busy fraction per CPU between two /proc/stat tick arrays."""
    b0, t0 = busy_idle(before)
    b1, t1 = busy_idle(after)
    dt = (t1 - t0).astype(np.float64)
    db = (b1 - b0).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        util = np.where(dt > 0, db / dt, np.nan)
    return np.clip(util, 0.0, 1.0)


# --------------------------------------------------------------------------- thermal


def _column_name(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").lower()


@dataclass
class _Sensor:
    column: str
    file: _OpenFile
    scale: float


class _SensorSet:
    """Named sensors read as floats with a scale each."""

    def __init__(self) -> None:
        self.sensors: list[_Sensor] = []

    @property
    def available(self) -> bool:
        return bool(self.sensors)

    @property
    def columns(self) -> list[str]:
        return [s.column for s in self.sensors]

    def _add(self, column: str, path: str, scale: float) -> None:
        f = _open_or_none(path)
        if f is None:
            return
        try:
            f.read()
        except OSError:  # e.g. a hwmon input that returns ENODATA
            f.close()
            return
        taken = set(self.columns)
        name, n = column, 2
        while name in taken:
            name = f"{column}_{n}"
            n += 1
        self.sensors.append(_Sensor(name, f, scale))

    def read(self) -> dict[str, float]:
        out = {}
        for s in self.sensors:
            try:
                out[s.column] = _to_float(s.file.read()) * s.scale
            except OSError:
                out[s.column] = math.nan
        return out

    def close(self) -> None:
        for s in self.sensors:
            s.file.close()


class ThermalReader(_SensorSet):
    """Temperatures of ``class/thermal/thermal_zone*`` in °C, one column per
    zone named ``temp_<type>_c`` (e.g. ``temp_x86_pkg_temp_c``)."""

    def __init__(self, sysfs: str = "/sys") -> None:
        super().__init__()
        base = os.path.join(sysfs, "class/thermal")
        try:
            zones = sorted((d for d in os.listdir(base) if d.startswith("thermal_zone")), key=lambda d: int(d[12:] or 0))
        except OSError:
            zones = []
        for zone in zones:
            kind = _read_text(os.path.join(base, zone, "type")) or zone
            self._add(f"temp_{_column_name(kind)}_c", os.path.join(base, zone, "temp"), 1e-3)


#: hwmon input prefixes (Documentation/hwmon/sysfs-interface.rst): (prefix, scale to SI, column suffix)
_HWMON_KINDS = (
    ("temp", 1e-3, "c"),
    ("power", 1e-6, "w"),
    ("in", 1e-3, "v"),
    ("curr", 1e-3, "a"),
    ("energy", 1e-6, "j"),
    ("fan", 1.0, "rpm"),
)


class HwmonReader(_SensorSet):
    """Sensors of ``class/hwmon/hwmon*``: temperatures, power, voltage, current,
    energy and fans, converted to SI units, one column per input named
    ``hwmon_<chip>_<label or input>_<unit>`` (e.g. ``hwmon_coretemp_package_id_0_c``,
    ``hwmon_ina3221_vdd_in_w``). ``kinds`` selects input prefixes."""

    def __init__(self, sysfs: str = "/sys", kinds: Iterable[str] = ("temp", "power", "in", "curr", "energy")) -> None:
        super().__init__()
        kinds = set(kinds)
        base = os.path.join(sysfs, "class/hwmon")
        try:
            chips = sorted((d for d in os.listdir(base) if d.startswith("hwmon")), key=lambda d: int(d[5:] or 0))
        except OSError:
            chips = []
        for chip in chips:
            cdir = os.path.join(base, chip)
            name = _read_text(os.path.join(cdir, "name")) or chip
            try:
                files = sorted(os.listdir(cdir))
            except OSError:
                continue
            for prefix, scale, unit in _HWMON_KINDS:
                if prefix not in kinds:
                    continue
                for fname in files:
                    m = re.fullmatch(rf"{prefix}(\d+)_input", fname)
                    if not m:
                        continue
                    label = _read_text(os.path.join(cdir, f"{prefix}{m.group(1)}_label")) or f"{prefix}{m.group(1)}"
                    self._add(
                        f"hwmon_{_column_name(name)}_{_column_name(label)}_{unit}",
                        os.path.join(cdir, fname),
                        scale,
                    )


# --------------------------------------------------------------------------- powercap (RAPL via sysfs)


@dataclass
class _PowercapZone:
    column: str
    file: _OpenFile
    max_range_uj: int
    last_uj: int | None = None


class PowercapReader:
    """Energy of ``class/powercap/<zone>`` (``intel-rapl:0``, ``intel-rapl:0:0``,
    ``amd-rapl``...) as Joules per interval, one column per zone named
    ``energy_<zone name>_j`` (``energy_package_0_j``, ``energy_core_j``).

    ``energy_uj`` wraps at ``max_energy_range_uj``; a delta that goes backwards
    is corrected by one wrap. Since Linux 5.10 (CVE-2020-8694) ``energy_uj``
    is readable by root only; unreadable zones are skipped.
    """

    def __init__(self, sysfs: str = "/sys") -> None:
        self.zones: list[_PowercapZone] = []
        base = os.path.join(sysfs, "class/powercap")
        try:
            # MSR-based zones (intel-rapl:N) before the MMIO duplicates (intel-rapl-mmio:N)
            names = sorted(os.listdir(base), key=lambda n: ("mmio" in n, n))
        except OSError:
            names = []
        taken: set[str] = set()
        for zname in names:
            zdir = os.path.join(base, zname)
            if not os.path.exists(os.path.join(zdir, "energy_uj")):
                continue
            f = _open_or_none(os.path.join(zdir, "energy_uj"))
            if f is None:
                continue
            try:
                f.read()
            except OSError:
                f.close()
                continue
            label = _column_name(_read_text(os.path.join(zdir, "name")) or zname)
            column = f"energy_{label}_j"
            if column in taken:  # e.g. "core" under two packages
                column = f"energy_{_column_name(zname)}_{label}_j"
            taken.add(column)
            rng = _read_int(os.path.join(zdir, "max_energy_range_uj")) or 0
            self.zones.append(_PowercapZone(column, f, rng))

    @property
    def available(self) -> bool:
        return bool(self.zones)

    @property
    def columns(self) -> list[str]:
        return [z.column for z in self.zones]

    def read(self) -> dict[str, float]:
        """Joules consumed by each zone since the previous call (NaN the first time)."""
        out: dict[str, float] = {}
        for z in self.zones:
            try:
                now = int(z.file.read())
            except (OSError, ValueError):
                out[z.column] = math.nan
                continue
            last, z.last_uj = z.last_uj, now
            if last is None:
                out[z.column] = math.nan
                continue
            delta = now - last
            if delta < 0 and z.max_range_uj:
                delta += z.max_range_uj
            out[z.column] = delta * 1e-6
        return out

    def close(self) -> None:
        for z in self.zones:
            z.file.close()


# --------------------------------------------------------------------------- RAPL via the power PMU


@dataclass
class PowerPmuEvent:
    """An ``energy-*`` event of the ``power`` PMU (RAPL through perf):
    ``config`` to open it with ``attr.type = pmu_type``; a raw count times
    ``scale`` is in ``unit`` (Joules)."""

    name: str
    pmu_type: int
    config: int
    scale: float = 1.0
    unit: str = ""
    cpus: list[int] = field(default_factory=list)

    @property
    def column(self) -> str:
        return f"power/{self.name}/"


def _parse_event_config(text: str, formats: dict[str, tuple[str, int, int]]) -> int:
    """``event=0x02`` (sysfs events/<name>) against format/<field> bit ranges."""
    config = 0
    for term in text.strip().split(","):
        if not term:
            continue
        key, _, val = term.partition("=")
        value = int(val, 0) if val else 1
        fmt = formats.get(key)
        if fmt is None or fmt[0] != "config":
            if key == "event":
                config |= value
            continue
        lo, hi = fmt[1], fmt[2]
        config |= (value & ((1 << (hi - lo + 1)) - 1)) << lo
    return config


def power_pmu_events(sysfs: str = "/sys") -> list[PowerPmuEvent]:
    """The ``energy-*`` events of ``bus/event_source/devices/power`` with their
    ``.scale`` and ``.unit`` (Joules) and the PMU's cpumask (one CPU per
    package). Empty when the machine has no RAPL PMU."""
    base = os.path.join(sysfs, "bus/event_source/devices/power")
    pmu_type = _read_int(os.path.join(base, "type"))
    if pmu_type is None:
        return []
    formats: dict[str, tuple[str, int, int]] = {}
    try:
        for fname in os.listdir(os.path.join(base, "format")):
            text = _read_text(os.path.join(base, "format", fname)) or ""
            m = re.fullmatch(r"(config\d?):(\d+)(?:-(\d+))?", text)
            if m:
                lo = int(m.group(2))
                formats[fname] = (m.group(1), lo, int(m.group(3) or lo))
    except OSError:
        pass
    cpus = parse_cpu_list(_read_text(os.path.join(base, "cpumask")) or "0")
    events = []
    try:
        names = sorted(os.listdir(os.path.join(base, "events")))
    except OSError:
        names = []
    for name in names:
        if "." in name or not name.startswith("energy-"):
            continue
        text = _read_text(os.path.join(base, "events", name)) or ""
        scale_text = _read_text(os.path.join(base, "events", f"{name}.scale"))
        unit = _read_text(os.path.join(base, "events", f"{name}.unit")) or ""
        events.append(
            PowerPmuEvent(
                name=name,
                pmu_type=pmu_type,
                config=_parse_event_config(text, formats),
                scale=float(scale_text) if scale_text else 1.0,
                unit=unit,
                cpus=cpus,
            )
        )
    return events


# --------------------------------------------------------------------------- all of it


class ContextSampler:
    """Reads every available context source for ``cpus`` in one call.

    Per-CPU columns: ``freq_mhz`` (float), ``util`` (0..1 busy fraction since
    the previous sample, from /proc/stat) and ``governor`` (string). Machine
    columns: thermal zones, hwmon sensors and powercap energy, named by
    :attr:`machine_columns`. Each source can be disabled; missing sources
    produce NaN (per-CPU) or no column (machine).
    """

    def __init__(
        self,
        cpus: Sequence[int],
        sysfs: str = "/sys",
        procfs: str = "/proc",
        *,
        freq: bool = True,
        util: bool = True,
        thermal: bool = True,
        hwmon: bool = True,
        powercap: bool = True,
    ) -> None:
        self.cpus = list(cpus)
        self.freq = CpuFreqReader(self.cpus, sysfs) if freq else None
        self.procstat = ProcStatReader(self.cpus, procfs) if util else None
        self.thermal = ThermalReader(sysfs) if thermal else None
        self.hwmon = HwmonReader(sysfs) if hwmon else None
        self.powercap = PowercapReader(sysfs) if powercap else None
        self._freq_khz = np.empty(len(self.cpus))
        self._last_util = np.full(len(self.cpus), np.nan)
        if self.procstat is not None:
            self.procstat.utilization()  # prime the first delta

    @property
    def machine_columns(self) -> list[str]:
        cols: list[str] = []
        for src in (self.thermal, self.hwmon, self.powercap):
            if src is not None:
                cols.extend(src.columns)
        return cols

    @property
    def util_only(self) -> bool:
        """Whether /proc/stat is the only source that changes between samples
        (no cpufreq file, no thermal, hwmon or powercap sensor): then a sample
        without utilization returns what the last one did."""
        return (self.freq is None or not self.freq.available) and not self.machine_columns

    @property
    def governors(self) -> list[str]:
        return self.freq.governors if self.freq is not None else [""] * len(self.cpus)

    def sample(self, util: bool = True) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """(freq_mhz[ncpus], util[ncpus], {machine column: value}). With
        ``util=False`` /proc/stat is not read and the last utilization is
        returned again."""
        if self.freq is not None:
            freq = self.freq.read_khz(self._freq_khz) / 1000.0
        else:
            freq = np.full(len(self.cpus), np.nan)
        if not util:
            util_v = self._last_util
        elif self.procstat is not None:
            util_v = self._last_util = self.procstat.utilization()
        else:
            util_v = self._last_util
        machine: dict[str, float] = {}
        for src in (self.thermal, self.hwmon, self.powercap):
            if src is not None:
                machine.update(src.read())
        return freq, util_v, machine

    def close(self) -> None:
        for src in (self.freq, self.procstat, self.thermal, self.hwmon, self.powercap):
            if src is not None:
                src.close()
