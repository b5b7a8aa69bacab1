package api

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cRegion prints the region's layout as libvcuda's private header has it.
const cRegion = `#include <stdio.h>
#include <stddef.h>
#include "vcuda.h"
int main(void) {
	printf("size=%zu dev=%zu devsize=%zu used=%zu sizeoff=%zu ndev=%zu magic=%u version=%u file=%s\n",
	       sizeof(struct vc_region), offsetof(struct vc_region, dev), sizeof(struct vc_region_dev),
	       offsetof(struct vc_region_dev, used), offsetof(struct vc_region, size), offsetof(struct vc_region, ndev),
	       VC_REGION_MAGIC, VC_REGION_VERSION, VC_REGION_FILE);
	return 0;
}
`

func TestRegionLayoutMatchesCHeader(t *testing.T) {
	cc := cCompiler()
	if cc == "" {
		t.Skip("no C compiler (cc or gcc) on PATH")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "region.c"), filepath.Join(dir, "region")
	if err := os.WriteFile(src, []byte(cRegion), 0o644); err != nil {
		t.Fatal(err)
	}
	inc, _ := filepath.Abs(filepath.Join("..", "vcuda", "include"))
	priv, _ := filepath.Abs(filepath.Join("..", "vcuda", "src"))
	if out, err := exec.Command(cc, "-std=gnu11", "-Wall", "-Werror", "-D_GNU_SOURCE", "-I", inc, "-I", priv, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("compiling against vcuda/src/vcuda.h: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := fmt.Sprintf("size=%d dev=%d devsize=%d used=0 sizeoff=%d ndev=%d magic=%d version=%d file=%s\n",
		RegionSize, regionDevOffset, regionDevSize, regionOffSize, regionOffDevCount, RegionMagic, RegionVersion, RegionFile)
	if string(out) != want {
		t.Errorf("libvcuda's region and the Go mirror differ:\nC:  %sGo: %s", out, want)
	}
}

func region(n int, used ...uint64) []byte {
	b := make([]byte, RegionHeadSize)
	le := binary.LittleEndian
	le.PutUint32(b, RegionMagic)
	le.PutUint32(b[4:], RegionVersion)
	le.PutUint32(b[regionOffSize:], RegionSize)
	le.PutUint32(b[regionOffDevCount:], uint32(n))
	for i, u := range used {
		le.PutUint64(b[regionDevOffset+i*regionDevSize:], u)
	}
	return b
}

func TestRegionUsed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		b       []byte
		n       int
		want    []uint64
		wantErr string
	}{
		{name: "two devices", b: region(2, 1<<30, 5<<20), n: 2, want: []uint64{1 << 30, 5 << 20}},
		{name: "short file", b: region(1)[:100], n: 1, wantErr: "100 bytes"},
		{name: "not initialised", b: make([]byte, RegionHeadSize), n: 1, wantErr: "not initialised"},
		{name: "other device count", b: region(3), n: 2, wantErr: "3 devices, the container's limiter config has 2"},
		{name: "other release", b: func() []byte { b := region(1); b[4] = 9; return b }(), n: 1, wantErr: "different releases"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RegionUsed(tc.b, tc.n)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
