"""SwitchTracker's timeline from switch-in records, without a kernel: the u32
pid/tid of a record's sample_id may be 0xffffffff (the kernel's -1 for an
exiting task), which reads as "no task known", not as an overflow."""

import numpy as np

from pmuscope.observe.switches import SwitchTracker


def test_exiting_task_pid_is_unknown_not_an_overflow():
    tr = SwitchTracker([1], background=False)
    log = tr._logs[1]
    log.times += [100, 200, 300]
    log.pids += [42, 0xFFFFFFFF, 7]
    log.tids += [43, 0xFFFFFFFF, 8]
    got = tr.attribute(1, np.array([50, 150, 250, 350], dtype=np.int64))
    assert got.tolist() == [[-1, -1], [42, 43], [-1, -1], [7, 8]]
    assert tr.running_on(1, 250) is None and tr.running_on(1, 150) == (42, 43)
    tl = tr.timeline()
    assert tl["pid"].tolist() == [42, -1, 7] and tl["end"].tolist()[:2] == [200, 300]
