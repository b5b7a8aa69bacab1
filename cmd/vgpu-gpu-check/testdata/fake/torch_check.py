# Stands in for programs/torch_check.py on the project's fake driver (TestFakeDriverEndToEnd):
# the same modes, done by vcuda's workload program ($FAKE_WORKLOAD). burn launches wide kernels,
# elem (the probe's mode, see probe) narrow ones of another shape, each keeping its queue full.
# With FAKE_AS_H200=1 (make gpu-bundle-rehearsal) they do what the H200 ran (2026-11-29) instead:
# burn PyTorch's loop, matmuls of 1.67 ms at the full-load clock, four then a synchronize,
# drawing a GEMM's power, a quarter of their time bound by memory; elem the probe's elementwise
# loop, short kernels synchronized every 0.3 ms or so of work, drawing 0.13 of that power, bound
# by memory (no faster for a higher clock), its kernels ten times the probe's 4.6 us so that a
# small machine keeps launching them. Programs that synchronize that often are only as fast as
# the machine schedules them: the tests' stand-ins keep their queues full, which a busy CI
# machine cannot slow (a fresh clone's make test beside a busy loop read the probe-like loop's
# solo row at 11% of the GPU).
import json
import os
import subprocess
import sys
import time

# the real programs' start line: beside this file in a bundle, else in the source tree
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "programs"))
from vgpu_start import start_line  # noqa: E402

W = os.environ["FAKE_WORKLOAD"]


def workload(*args, env=None):
    p = subprocess.run([W, *args], capture_output=True, text=True, env={**os.environ, **(env or {})})
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("ok"):
                return r
            sys.exit("workload: " + r.get("error", line))
    sys.exit("workload: no JSON (exit %d): %s" % (p.returncode, p.stderr.strip()[-200:]))


def out(**kw):
    print(json.dumps(kw), flush=True)


mode = sys.argv[1]
if mode == "version":
    out(version="fake")
elif mode == "mem":
    r = workload("--chunk-mib", "1024", "--max-alloc-mib", str(int(sys.argv[3]) * 1024), "--seconds", "0")
    out(allocated_mib=r["allocated_bytes"] >> 20, refused=r["alloc_error"] == 2)
elif mode == "hold":  # the probe's: PATH GIB SECS [unlink]
    args = ["--chunk-mib", "1024", "--hold-mib", str(int(sys.argv[3]) * 1024), "--max-alloc-mib", "1", "--seconds", sys.argv[4]]
    if len(sys.argv) > 5 and sys.argv[5] == "unlink":
        args += ["--unlink-shared", "1"]
    # the workload prints its line at its end: the held memory is what it asked
    r = workload(*args, "--grid", "1", "--block", "32")
    out(allocated_mib=r["held_mib"], refused=False)
elif mode in ("burn", "elem"):
    shape = ["--grid", "200", "--block", "256"] if mode == "burn" else ["--grid", "2000", "--block", "32"]
    draw = {}
    every = sys.argv[3] if len(sys.argv) > 3 else "4"  # burn's SYNC_EVERY (0: never, its queue 110 ms deep)
    if os.environ.get("FAKE_AS_H200") and mode == "burn":
        shape += ["--ns-per-block", "8350"] + (["--batch", every] if every != "0" else [])
        draw = {"FAKEGPU_POWER": "1", "FAKEGPU_MEMBOUND": "0.25"}
        if every == "0":
            draw["FAKEGPU_MAX_QUEUE_US"] = "110000"
    elif os.environ.get("FAKE_AS_H200"):
        shape += ["--ns-per-block", "23", "--batch", "8"]
        draw = {"FAKEGPU_POWER": "0.13", "FAKEGPU_MEMBOUND": "1"}
    if mode == "burn":  # PyTorch's import and setup take seconds, the probe's under one
        time.sleep(float(os.environ.get("FAKE_IMPORT_SECS", "0")))
    start_line()
    r = workload("--seconds", sys.argv[2], *shape, env=draw)
    # over the second half, as the real programs measure (the limiter has settled by then)
    out(rate=r["half_launches"] / max(r["half_seconds"], 1e-9), util_share=r["util_share"])
elif mode == "slicing":  # the slicing program (programs/slicing.cu): SECS OUT [PERIOD_US START_US LEN_US FILL]
    # kernels of 100 us (100 blocks at 1 us), the engine's record of what ran as its intervals
    args = ["--seconds", sys.argv[2], "--stamps", sys.argv[3], "--grid", "100", "--block", "128", "--ns-per-block", "1000"]
    if len(sys.argv) == 8:
        args += ["--slot", ",".join(sys.argv[4:8])]
    start_line()
    r = workload(*args)
    out(kernels=r["launches"], kernel_ns=r["kernel_ns"], rate=r["half_launches"] / max(r["half_seconds"], 1e-9), rt=r["rt"])
else:
    sys.exit("fake torch_check.py: mode %r is not modelled" % mode)
