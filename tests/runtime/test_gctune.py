"""tune_gc: the collector runs less often, but cyclic garbage is still collected."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import gc, weakref
    from drumbeat.runtime.gctune import GEN0_THRESHOLD, tune_gc

    class Node:
        pass

    tune_gc()
    assert gc.get_threshold()[0] == GEN0_THRESHOLD
    assert gc.get_freeze_count() > 0  # start-up objects are out of the collector's sight
    runs = []
    gc.callbacks.append(lambda phase, info: runs.append(phase) if phase == "stop" else None)
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counting alone cannot free it
    alive = weakref.ref(a)
    del a, b
    keep = [[] for _ in range(GEN0_THRESHOLD // 2)]
    assert alive() is not None and not runs, "collected before the threshold"
    keep += [[] for _ in range(GEN0_THRESHOLD)]
    assert alive() is None and runs, "not collected after the threshold"
    print("ok")
""")


def test_cycles_are_collected_after_the_threshold_not_before():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
