# CuPy tenant of vgpu-gpu-check; the same modes as torch_check.py (mem has one path: default).
import json
import sys
import time

import cupy
from vgpu_start import start_line


def out(**kw):
    print(json.dumps(kw), flush=True)


mode = sys.argv[1]
if mode == "version":
    out(version=cupy.__version__, cuda=str(cupy.cuda.runtime.runtimeGetVersion()))
elif mode == "ctx":
    x = cupy.zeros(1)
    cupy.cuda.Device().synchronize()
    out(ready=True)
    sys.stdin.read()
elif mode == "mem":
    max_chunks, max_secs = int(sys.argv[3]), float(sys.argv[4])
    chunks, refused, t0 = [], False, time.time()
    while len(chunks) < max_chunks and time.time() - t0 < max_secs:
        try:
            chunks.append(cupy.empty(1 << 30, dtype=cupy.uint8))
        except (cupy.cuda.memory.OutOfMemoryError, cupy.cuda.runtime.CUDARuntimeError):
            refused = True
            break
    cupy.cuda.Device().synchronize()
    out(allocated_mib=len(chunks) * 1024, refused=refused)
elif mode == "burn":
    secs, n = float(sys.argv[2]), 4096
    a = cupy.random.rand(n, n, dtype=cupy.float32)
    b = cupy.random.rand(n, n, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    start_line()
    t0, half, it = time.time(), None, 0
    while time.time() - t0 < secs:
        for _ in range(4):
            a @ b
        cupy.cuda.Device().synchronize()
        it += 4
        if half is None and time.time() - t0 >= secs / 2:
            half = (it, time.time())
    if half is None:
        half = (0, t0)
    out(rate=(it - half[0]) / max(time.time() - half[1], 1e-9))
else:
    sys.exit("cupy_check.py: unknown mode %r (version, ctx, mem, burn)" % mode)
