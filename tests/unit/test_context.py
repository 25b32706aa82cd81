"""Context readers against the fixture trees in tests/data/dvfs (no kernel needed)."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

from pmuscope.counting import context as ctx
from pmuscope.errors import PmuscopeError


@pytest.fixture
def dvfs(data_dir):
    return data_dir / "dvfs"


@pytest.fixture
def sysfs(dvfs):
    return str(dvfs / "sys")


def test_parse_cpu_list():
    assert ctx.parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert ctx.parse_cpu_list("") == []
    with pytest.raises(PmuscopeError, match="runs backwards"):
        ctx.parse_cpu_list("3-1")
    with pytest.raises(PmuscopeError, match="not N or N-M"):
        ctx.parse_cpu_list("0,x")


def test_online_cpus_from_fixture(sysfs):
    assert ctx.online_cpus(sysfs) == [0, 1, 2, 3]


def test_cpufreq_reads_khz_and_governors(sysfs):
    r = ctx.CpuFreqReader([0, 1, 2, 3], sysfs)
    assert r.available
    assert r.read_khz().tolist() == [2893421.0, 799927.0, 3400012.0, 1200000.0]
    assert r.governors == ["powersave", "powersave", "performance", "powersave"]
    assert r.min_khz.tolist() == [400000.0] * 4 and r.max_khz.tolist() == [4700000.0] * 4
    r.close()


def test_cpufreq_missing_cpu_is_nan(sysfs):
    r = ctx.CpuFreqReader([0, 7], sysfs)
    khz = r.read_khz()
    assert khz[0] == 2893421.0 and math.isnan(khz[1])
    assert r.governors == ["powersave", ""]


def test_cpufreq_rereads_changed_value(tmp_path, sysfs):
    root = tmp_path / "sys"
    shutil.copytree(sysfs, root)
    r = ctx.CpuFreqReader([0], str(root))
    assert r.read_khz()[0] == 2893421.0
    (root / "devices/system/cpu/cpu0/cpufreq/scaling_cur_freq").write_text("1600000\n")
    # the file is kept open; a rewritten sysfs file is a new inode, so reopen for the fixture
    r2 = ctx.CpuFreqReader([0], str(root))
    assert r2.read_khz()[0] == 1600000.0


def test_cpufreq_absent_tree(tmp_path):
    r = ctx.CpuFreqReader([0, 1], str(tmp_path))
    assert not r.available
    assert np.isnan(r.read_khz()).all()


def test_parse_proc_stat_real_capture(dvfs):
    parsed = ctx.parse_proc_stat((dvfs / "proc0/stat").read_bytes())
    assert set(parsed) == {-1, 0, 1}
    assert parsed[0].tolist() == [3097, 3, 872, 83131, 72, 0, 42, 82, 0, 0]
    # the aggregate line is the sum of the per-CPU lines, up to one tick per
    # field: the kernel converts each sum from ns to ticks separately
    assert np.abs(parsed[0] + parsed[1] - parsed[-1]).max() <= 1


def test_utilization_between_real_captures(dvfs):
    a = ctx.parse_proc_stat((dvfs / "proc0/stat").read_bytes())
    b = ctx.parse_proc_stat((dvfs / "proc1/stat").read_bytes())
    util = ctx.utilization_between(np.stack([a[0], a[1]]), np.stack([b[0], b[1]]))
    # cpu1 ran the busy loop for the second: 95 user + 1 system of 101 ticks
    assert util[1] == pytest.approx(96 / 101)
    assert util[0] == pytest.approx(3 / 98)


def test_procstat_reader_deltas(tmp_path, dvfs):
    (tmp_path / "stat").write_bytes((dvfs / "proc0/stat").read_bytes())
    r = ctx.ProcStatReader([0, 1], str(tmp_path))
    first = r.utilization()
    assert np.isnan(first).all()
    # replace in place (same inode) so the kept-open fd sees the new content
    with open(tmp_path / "stat", "r+b") as f:
        data = (dvfs / "proc1/stat").read_bytes()
        f.write(data)
        f.truncate(len(data))
    util = r.utilization()
    assert util[1] == pytest.approx(96 / 101)


def test_procstat_no_tick_is_nan():
    t = np.array([[1, 0, 1, 10, 0, 0, 0, 0, 0, 0]])
    assert np.isnan(ctx.utilization_between(t, t)).all()


def test_thermal_zones(sysfs):
    r = ctx.ThermalReader(sysfs)
    assert r.columns == ["temp_acpitz_c", "temp_int3400_thermal_c", "temp_x86_pkg_temp_c"]
    assert r.read() == pytest.approx({"temp_acpitz_c": 27.8, "temp_int3400_thermal_c": 20.0, "temp_x86_pkg_temp_c": 46.0})


def test_hwmon_units_and_labels(sysfs):
    r = ctx.HwmonReader(sysfs)
    v = r.read()
    assert v["hwmon_coretemp_package_id_0_c"] == pytest.approx(46.0)
    assert v["hwmon_coretemp_core_1_c"] == pytest.approx(45.0)
    assert v["hwmon_acpitz_temp1_c"] == pytest.approx(27.8)
    assert v["hwmon_ina3221_power1_w"] == pytest.approx(5.376)
    assert v["hwmon_ina3221_vdd_in_v"] == pytest.approx(5.056)
    assert v["hwmon_ina3221_curr2_a"] == pytest.approx(0.287)
    # temp*_max/crit are limits, not inputs
    assert not any("max" in c or "crit" in c for c in r.columns)


def test_hwmon_kinds_filter(sysfs):
    r = ctx.HwmonReader(sysfs, kinds=("power",))
    assert r.columns == ["hwmon_ina3221_power1_w", "hwmon_ina3221_power2_w"]


def test_powercap_energy_deltas_and_wrap(tmp_path, sysfs):
    root = tmp_path / "sys"
    shutil.copytree(sysfs, root)
    r = ctx.PowercapReader(str(root))
    # MSR zones first; the MMIO interface's duplicate package-0 gets its zone's name
    assert r.columns == ["energy_package_0_j", "energy_core_j", "energy_uncore_j", "energy_intel_rapl_mmio_0_package_0_j"]
    first = r.read()
    assert all(math.isnan(v) for v in first.values())
    base = root / "class/powercap"
    for zone, value in (("intel-rapl:0", 45313809211), ("intel-rapl:0:0", 20893915625), ("intel-rapl:0:1", 150)):
        with open(base / zone / "energy_uj", "r+") as f:
            f.write(f"{value}\n")
            f.truncate()
    second = r.read()
    assert second["energy_package_0_j"] == pytest.approx(1.0)
    assert second["energy_core_j"] == pytest.approx(0.5)
    # uncore wrapped: 850 µJ to the top of its range, then 150 µJ
    assert second["energy_uncore_j"] == pytest.approx(1000e-6)


def test_power_pmu_events(sysfs):
    evs = {e.name: e for e in ctx.power_pmu_events(sysfs)}
    assert sorted(evs) == ["energy-cores", "energy-pkg", "energy-psys", "energy-ram"]
    pkg = evs["energy-pkg"]
    assert (pkg.pmu_type, pkg.config, pkg.unit, pkg.cpus) == (23, 2, "Joules", [0])
    assert pkg.scale == pytest.approx(2.3283064365386962890625e-10)
    assert pkg.column == "power/energy-pkg/"


def test_no_power_pmu(tmp_path):
    assert ctx.power_pmu_events(str(tmp_path)) == []


def test_context_sampler_fixture(dvfs, sysfs):
    s = ctx.ContextSampler([0, 1], sysfs, str(dvfs / "proc0"))
    freq, util, machine = s.sample()
    assert freq.tolist() == pytest.approx([2893.421, 799.927])
    assert util.shape == (2,)
    assert s.governors == ["powersave", "powersave"]
    assert "temp_x86_pkg_temp_c" in s.machine_columns and "energy_package_0_j" in s.machine_columns
    assert set(machine) == set(s.machine_columns)
    assert not s.util_only  # frequencies and sensors change between /proc/stat samples
    s.close()


def test_context_sampler_util_only_repeats_itself_between_util_samples(dvfs, tmp_path):
    # a machine with /proc/stat and nothing else (a VM): a sample without
    # utilization is the last one again, so the monitor may skip it
    s = ctx.ContextSampler([0, 1], str(tmp_path), str(dvfs / "proc0"))
    assert s.util_only
    f1, u1, m1 = s.sample(util=True)
    f2, u2, m2 = s.sample(util=False)
    assert np.isnan(f1).all() and np.isnan(f2).all()
    assert u2 is u1 and m1 == m2 == {}
    s.close()


def test_context_sampler_on_empty_machine(tmp_path):
    s = ctx.ContextSampler([0], str(tmp_path), str(tmp_path))
    freq, util, machine = s.sample()
    assert math.isnan(freq[0]) and math.isnan(util[0]) and machine == {}
    assert s.machine_columns == []
