"""CPUID dump and decoding, on leaves captured from an AMD EPYC KVM guest and on this machine."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from pmuscope.system import cpuid_dump

from ..conftest import DATA, ROOT


def fixture_table() -> dict:
    raw = json.loads((DATA / "cpuid" / "amd-epyc-kvm.json").read_text())["leaves"]
    return {(leaf, sub): (a, b, c, d) for leaf, sub, a, b, c, d in raw}


def test_decode_fixture():
    leaves = cpuid_dump.dump(fixture_table())
    d = cpuid_dump.decode(leaves)
    assert d["vendor"] == "AuthenticAMD" and d["brand"] == "AMD EPYC"
    assert (d["family"], d["model"], d["stepping"], d["signature"]) == (0x1A, 2, 1, 0x00B00F21)
    assert "avx512f" in d["features"]["7:ebx"] and "hypervisor" in d["features"]["1:ecx"]
    assert "lm" in d["features"]["0x80000001:edx"]
    assert [(c["level"], c["type"], c["size"]) for c in d["caches"]] == [
        (1, "data", 48 << 10), (1, "instruction", 32 << 10), (2, "unified", 1 << 20), (3, "unified", 32 << 20)]
    assert d["hypervisor"]["vendor"] == "KVMKVMKVM" and "steal_time" in d["hypervisor"]["kvm_features"]
    assert any(t["what"] == "L1 dTLB 4K" and t["entries"] == 96 for t in d["tlbs"])
    text = cpuid_dump.render(leaves)
    assert 'vendor_id = "AuthenticAMD"' in text and "L2 unified" in text and "full" in text
    assert "   0x00000000 0x00: eax=0x0000001c ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65" in text
    # subleaf walks stop at the terminator (cache type 0)
    assert [lf.subleaf for lf in leaves if lf.leaf == 0x8000001D] == [0, 1, 2, 3]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="CPUID is an x86 instruction")
def test_this_machine_native_agrees_with_dev_cpuid():
    native = cpuid_dump.reader()
    assert cpuid_dump._s(*[native(0, 0)[i] for i in (1, 3, 2)]) in ("GenuineIntel", "AuthenticAMD", "HygonGenuine",
                                                                      "CentaurHauls", "  Shanghai  ")
    if not os.access("/dev/cpu/0/cpuid", os.R_OK):
        pytest.skip("no /dev/cpu/0/cpuid (cpuid module not loaded)")
    dev = cpuid_dump.reader(0)
    for leaf in (0, 0x80000000, 0x80000002, 0x8000001D):
        assert native(leaf, 0) == dev(leaf, 0)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="CPUID is an x86 instruction")
def test_cli_topology_cpuid():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, "-m", "pmuscope", "topology", "--cpuid"], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert out.startswith("CPU:\n   vendor_id = ") and "feature flags:" in out and "raw leaves:" in out
    js = json.loads(subprocess.run([sys.executable, "-m", "pmuscope", "topology", "--cpuid", "--json"],
                                   capture_output=True, text=True, env=env, check=True).stdout)
    assert js["decoded"]["family"] > 0 and js["leaves"][0]["leaf"] == 0
