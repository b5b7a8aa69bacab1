# PyTorch tenant of vgpu-gpu-check. Modes (one JSON line on stdout):
#   version                      {"version": ..., "cuda": ...}
#   ctx                          open a context with one tiny allocation, {"ready": true}, hold until stdin closes
#   mem PATH MAX_CHUNKS MAX_SECS allocate 1 GiB chunks until refused, MAX_CHUNKS held or MAX_SECS gone:
#                                {"allocated_mib": N, "refused": bool}; PATH is chosen by the check through
#                                PYTORCH_CUDA_ALLOC_CONF (default, expandable_segments, cudaMallocAsync)
#   burn SECS [SYNC_EVERY]       bf16 matmuls back to back, a synchronize every SYNC_EVERY (default 4; 0:
#                                never, but at the half and the end: the queue as deep as CUDA lets it grow),
#                                {"rate": matmuls/s over the second half}
# burn waits, set up, at the check's start line (vgpu_start.py): the tenants of a row run their SECS
# together, whatever their imports took.
import json
import sys
import time

import torch
from vgpu_start import start_line


def out(**kw):
    print(json.dumps(kw), flush=True)


mode = sys.argv[1]
if mode == "version":
    out(version=torch.__version__, cuda=torch.version.cuda)
elif mode == "ctx":
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    out(ready=True)
    sys.stdin.read()
elif mode == "mem":
    max_chunks, max_secs = int(sys.argv[3]), float(sys.argv[4])
    chunks, refused, t0 = [], False, time.time()
    while len(chunks) < max_chunks and time.time() - t0 < max_secs:
        try:
            chunks.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
        except RuntimeError:  # torch.cuda.OutOfMemoryError and allocator errors
            refused = True
            break
    torch.cuda.synchronize()
    out(allocated_mib=len(chunks) * 1024, refused=refused)
elif mode == "burn":
    secs, n = float(sys.argv[2]), 8192
    every = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start_line()
    t0, half, it = time.time(), None, 0
    while time.time() - t0 < secs:
        for _ in range(every or 4):
            a @ b
        if every:
            torch.cuda.synchronize()
        it += every or 4
        if half is None and time.time() - t0 >= secs / 2:
            torch.cuda.synchronize()  # count from what ran, not from what is queued
            half = (it, time.time())
    torch.cuda.synchronize()
    if half is None:
        half = (0, t0)
    out(rate=(it - half[0]) / max(time.time() - half[1], 1e-9))
else:
    sys.exit("torch_check.py: unknown mode %r (version, ctx, mem, burn)" % mode)
