package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// program is a CUDA program the check runs as a tenant. Its command takes
// "mem <path>" (allocate 1 GiB chunks until refused, print
// {"allocated_mib":N}), "burn <seconds>" (compute back to back, print
// {"rate":R}: work items per second over the second half) or "ctx x" (open
// a CUDA context with one tiny allocation, print {"ready":true}, hold it
// until stdin closes).
type program struct {
	name     string
	cmd      []string
	env      map[string][]string // per memory path, extra environment
	memPaths []string
}

const torchSrc = `import json, sys, time
import torch
mode = sys.argv[1]
if mode == "ctx":
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.read()
elif mode == "mem":
    chunks = []
    try:
        while True:
            chunks.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
    except RuntimeError:
        pass
    print(json.dumps({"allocated_mib": len(chunks) * 1024}))
else:
    secs, n = float(sys.argv[2]), 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t0 = time.time(); half = None; it = 0
    while time.time() - t0 < secs:
        for _ in range(4):
            a @ b
        torch.cuda.synchronize()
        it += 4
        if half is None and time.time() - t0 >= secs / 2:
            half = (it, time.time())
    print(json.dumps({"rate": (it - half[0]) / (time.time() - half[1])}))
`

const cupySrc = `import json, sys, time
import cupy
mode = sys.argv[1]
if mode == "ctx":
    x = cupy.zeros(1)
    cupy.cuda.Device().synchronize()
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.read()
elif mode == "mem":
    chunks = []
    try:
        while True:
            chunks.append(cupy.empty(1 << 30, dtype=cupy.uint8))
    except cupy.cuda.memory.OutOfMemoryError:
        pass
    print(json.dumps({"allocated_mib": len(chunks) * 1024}))
else:
    secs, n = float(sys.argv[2]), 4096
    a = cupy.random.rand(n, n, dtype=cupy.float32)
    b = cupy.random.rand(n, n, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    t0 = time.time(); half = None; it = 0
    while time.time() - t0 < secs:
        for _ in range(4):
            a @ b
        cupy.cuda.Device().synchronize()
        it += 4
        if half is None and time.time() - t0 >= secs / 2:
            half = (it, time.time())
    print(json.dumps({"rate": (it - half[0]) / (time.time() - half[1])}))
`

// probeSrc: the driver API's own paths (cuMemAlloc, managed, async, VMM) and
// a spinning kernel.
const probeSrc = `#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
__global__ void spin(long long cycles){long long s=clock64();while(clock64()-s<cycles){}}
int main(int argc,char**argv){
  if(argc<3)return 2;
  cudaFree(0);
  if(!strcmp(argv[1],"ctx")){void*p;cudaMalloc(&p,512);cudaDeviceSynchronize();
    printf("{\"ready\":true}\n");fflush(stdout);while(getchar()!=EOF){}return 0;}
  if(!strcmp(argv[1],"mem")){
    size_t n=0; void*p; const size_t G=1ull<<30;
    for(;;){
      cudaError_t e;
      if(!strcmp(argv[2],"managed")) e=cudaMallocManaged(&p,G);
      else if(!strcmp(argv[2],"async")){ e=cudaMallocAsync(&p,G,0); if(e==cudaSuccess) e=cudaStreamSynchronize(0);}
      else e=cudaMalloc(&p,G);
      if(e!=cudaSuccess)break;
      if(!strcmp(argv[2],"managed")) cudaMemset(p,1,G);
      n++;
    }
    printf("{\"allocated_mib\":%zu}\n",n*1024);return 0;
  }
  double secs=atof(argv[2]),t0=now(),th=0;long it=0,ih=0;
  while(now()-t0<secs){for(int i=0;i<8;i++)spin<<<132,128>>>(1000000);cudaDeviceSynchronize();it+=8;
    if(!th&&now()-t0>=secs/2){th=now();ih=it;}}
  printf("{\"rate\":%f}\n",(it-ih)/(now()-th));return 0;}
`

// findPrograms lists what this machine can run.
func findPrograms(ctx context.Context, work string) ([]program, error) {
	var out []program
	py, pyErr := exec.LookPath("python3")
	if pyErr == nil {
		for _, p := range []struct {
			name, module, src string
			paths             []string
			env               map[string][]string
		}{
			{"pytorch", "torch", torchSrc, []string{"default", "expandable", "async"}, map[string][]string{
				"expandable": {"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
				"async":      {"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"}}},
			{"cupy", "cupy", cupySrc, []string{"default"}, nil},
		} {
			if _, err := output(ctx, time.Minute, py, "-c", "import "+p.module); err != nil {
				continue
			}
			f := filepath.Join(work, p.name+".py")
			if err := os.WriteFile(f, []byte(p.src), 0o644); err != nil {
				return nil, err
			}
			out = append(out, program{name: p.name, cmd: []string{py, f}, memPaths: p.paths, env: p.env})
		}
	}
	if nvcc, err := exec.LookPath("nvcc"); err == nil {
		src, bin := filepath.Join(work, "probe.cu"), filepath.Join(work, "probe")
		if err := os.WriteFile(src, []byte(probeSrc), 0o644); err != nil {
			return nil, err
		}
		if _, err := output(ctx, 5*time.Minute, nvcc, "-O2", "-o", bin, src, "-lcuda"); err == nil {
			out = append(out, program{name: "cuda-probe", cmd: []string{bin}, memPaths: []string{"malloc", "managed", "async"}})
		}
	}
	return out, nil
}
