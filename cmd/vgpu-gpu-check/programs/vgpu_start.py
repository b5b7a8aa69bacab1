# The check's start line, shared by its Python tenants (torch_check.py, cupy_check.py) and the
# fake driver's stand-in: set up, a tenant creates its ready file (VGPU_CHECK_READY) and waits, at
# most 120 s, for the row's start file (VGPU_CHECK_START), so that the tenants of a row run their
# timed loops together whatever their imports took. Nothing to wait for outside the check.
import os
import time


def start_line():
    ready, start = os.environ.get("VGPU_CHECK_READY"), os.environ.get("VGPU_CHECK_START")
    if not ready or not start:
        return
    open(ready, "w").close()
    t = time.time()
    while not os.path.exists(start) and time.time() - t < 120:
        time.sleep(0.005)
