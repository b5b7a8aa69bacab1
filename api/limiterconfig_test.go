package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fixedLimiterConfig is the value both the Go and the C side encode in the
// cross-check; cProgram below fills the same fields.
func fixedLimiterConfig() LimiterConfig {
	return LimiterConfig{
		Policy:        ComputeBalance,
		PodUID:        "6d1c7f0e-5a1b-4c2d-8e3f-000000000042",
		PodNamespace:  "team-a",
		PodName:       "trainer-0",
		ContainerName: "main",
		SharedDir:     "/var/run/vcuda",
		Devices: []LimiterDevice{
			{UUID: "GPU-8f1c2a3b-1111-4222-8333-944455566677", MemoryLimitBytes: 20480 << 20, CorePercent: 25, ContextMiB: 512},
			{UUID: "MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", MemoryLimitBytes: 1 << 30, CorePercent: 100},
		},
		MPSThreadPercent: 30,
	}
}

// The C side: "write FILE" writes the fixed config through the header;
// "read FILE" validates a file with vcuda_config_validate and dumps it.
const cProgram = `#include <stdio.h>
#include <string.h>
#include "vcuda_config.h"
int main(int argc, char **argv) {
	struct vcuda_config c;
	if (argc != 3) return 2;
	if (strcmp(argv[1], "write") == 0) {
		memset(&c, 0, sizeof(c));
		c.magic = VCUDA_CONFIG_MAGIC; c.version = VCUDA_CONFIG_VERSION; c.size = sizeof(c);
		c.policy = VCUDA_POLICY_BALANCE; c.device_count = 2; c.mps_thread_percent = 30;
		strcpy(c.pod_uid, "6d1c7f0e-5a1b-4c2d-8e3f-000000000042");
		strcpy(c.pod_namespace, "team-a"); strcpy(c.pod_name, "trainer-0");
		strcpy(c.container_name, "main"); strcpy(c.shared_dir, "/var/run/vcuda");
		strcpy(c.devices[0].uuid, "GPU-8f1c2a3b-1111-4222-8333-944455566677");
		c.devices[0].memory_limit = 20480ull << 20; c.devices[0].core_percent = 25; c.devices[0].context_mib = 512;
		strcpy(c.devices[1].uuid, "MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9");
		c.devices[1].memory_limit = 1ull << 30; c.devices[1].core_percent = 100;
		vcuda_config_seal(&c);
		FILE *f = fopen(argv[2], "wb");
		return f && fwrite(&c, sizeof(c), 1, f) == 1 && fclose(f) == 0 ? 0 : 1;
	}
	char err[256];
	FILE *f = fopen(argv[2], "rb");
	if (!f || fread(&c, sizeof(c), 1, f) != 1) { printf("error: short file\n"); return 1; }
	if (vcuda_config_validate(&c, err, sizeof(err)) != 0) { printf("error: %s\n", err); return 1; }
	printf("policy=%u\nmps_thread_percent=%u\npod_uid=%s\npod_namespace=%s\npod_name=%s\ncontainer_name=%s\nshared_dir=%s\n",
	       c.policy, c.mps_thread_percent, c.pod_uid, c.pod_namespace, c.pod_name, c.container_name, c.shared_dir);
	for (unsigned i = 0; i < c.device_count; i++)
		printf("device=%s,%llu,%u,%u\n", c.devices[i].uuid,
		       (unsigned long long)c.devices[i].memory_limit, c.devices[i].core_percent, c.devices[i].context_mib);
	return 0;
}
`

// cCompiler is cc, else gcc, else "".
func cCompiler() string {
	for _, name := range []string{"cc", "gcc"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// buildCProgram compiles cProgram against vcuda/include; skips without a C compiler.
func buildCProgram(t *testing.T) string { return buildC(t, cProgram) }

// buildC compiles src against vcuda/include; skips without a C compiler.
func buildC(t *testing.T, src string) string {
	t.Helper()
	cc := cCompiler()
	if cc == "" {
		t.Skip("no C compiler (cc or gcc) on PATH")
	}
	inc, err := filepath.Abs(filepath.Join("..", "vcuda", "include"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file, bin := filepath.Join(dir, "prog.c"), filepath.Join(dir, "prog")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-std=gnu11", "-Wall", "-Werror", "-I", inc, "-o", bin, file).CombinedOutput(); err != nil {
		t.Fatalf("compiling against vcuda/include: %v\n%s", err, out)
	}
	return bin
}

func cRead(t *testing.T, bin string, b []byte) (string, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "vcuda.config")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "read", f).CombinedOutput()
	return string(out), err
}

func TestLimiterConfigMatchesCHeader(t *testing.T) {
	bin := buildCProgram(t)
	cfg := fixedLimiterConfig()

	// C -> bytes: Go encodes the same bytes and decodes them to the same value.
	f := filepath.Join(t.TempDir(), "from-c")
	if out, err := exec.Command(bin, "write", f).CombinedOutput(); err != nil {
		t.Fatalf("C writer: %v\n%s", err, out)
	}
	fromC, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	fromGo, err := cfg.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(fromC) != LimiterConfigSize || len(fromGo) != LimiterConfigSize {
		t.Fatalf("sizes: C %d, Go %d, want %d", len(fromC), len(fromGo), LimiterConfigSize)
	}
	for i := range fromC {
		if fromC[i] != fromGo[i] {
			t.Fatalf("byte %d: C wrote 0x%02x, Go encodes 0x%02x", i, fromC[i], fromGo[i])
		}
	}
	got, err := DecodeLimiterConfig(fromC)
	if err != nil {
		t.Fatalf("decoding the C bytes: %v", err)
	}
	if d := cmp.Diff(&cfg, got); d != "" {
		t.Errorf("decoded C bytes (-want +got):\n%s", d)
	}

	// Go -> bytes: the C validator accepts them and reads the same fields.
	out, err := cRead(t, bin, fromGo)
	if err != nil {
		t.Fatalf("C rejected Go bytes: %v\n%s", err, out)
	}
	want := "policy=2\nmps_thread_percent=30\npod_uid=6d1c7f0e-5a1b-4c2d-8e3f-000000000042\npod_namespace=team-a\n" +
		"pod_name=trainer-0\ncontainer_name=main\nshared_dir=/var/run/vcuda\n" +
		"device=GPU-8f1c2a3b-1111-4222-8333-944455566677,21474836480,25,512\n" +
		"device=MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9,1073741824,100,0\n"
	if d := cmp.Diff(want, out); d != "" {
		t.Errorf("C read of Go bytes (-want +got):\n%s", d)
	}
}

// patch edits encoded bytes and, unless keepCRC, reseals them.
func patch(b []byte, keepCRC bool, edit func([]byte)) []byte {
	c := append([]byte(nil), b...)
	edit(c)
	if !keepCRC {
		binary.LittleEndian.PutUint32(c[LimiterConfigSize-4:], crc32.ChecksumIEEE(c[:LimiterConfigSize-4]))
	}
	return c
}

func put32(off int, v uint32) func([]byte) {
	return func(b []byte) { binary.LittleEndian.PutUint32(b[off:], v) }
}

// Both sides reject the same broken files and name the same field.
func TestLimiterConfigRejectsLikeC(t *testing.T) {
	good, err := (&LimiterConfig{
		Policy: ComputeFixed, PodUID: "u", PodNamespace: "ns", PodName: "p", ContainerName: "c",
		SharedDir: "/s", Devices: []LimiterDevice{{UUID: "GPU-8f1c2a3b-1111-4222-8333-944455566677", MemoryLimitBytes: 1 << 20, CorePercent: 50}},
	}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	dev0 := 728
	tests := []struct {
		name, field string
		b           []byte
	}{
		{"flipped byte", "crc32", patch(good, true, func(b []byte) { b[160] ^= 1 })},
		{"other magic", "magic", patch(good, false, put32(0, 0x12345678))},
		{"version 2", "version", patch(good, false, put32(4, 2))},
		{"policy 3", "policy", patch(good, false, put32(12, 3))},
		{"no devices", "device_count", patch(good, false, put32(16, 0))},
		{"17 devices", "device_count", patch(good, false, put32(16, 17))},
		{"reserved tail set", "reserved", patch(good, false, put32(2008, 1))},
		{"mps thread percent 101", "mps_thread_percent", patch(good, false, put32(20, 101))},
		{"junk after pod_name", "pod_name", patch(good, false, func(b []byte) { b[152+100] = 'x' })},
		{"empty container name", "container_name", patch(good, false, func(b []byte) { b[408] = 0 })},
		{"relative shared_dir", "shared_dir", patch(good, false, func(b []byte) { b[472] = 's' })},
		{"short uuid", "devices[0].uuid", patch(good, false, func(b []byte) { b[dev0+10] = 0; clear(b[dev0+11 : dev0+64]) })},
		{"memory 0", "devices[0].memory_limit", patch(good, false, func(b []byte) { clear(b[dev0+64 : dev0+72]) })},
		{"core 101", "devices[0].core_percent", patch(good, false, put32(dev0+72, 101))},
		{"context as large as the cap", "devices[0].context_mib", patch(good, false, put32(dev0+76, 1))}, // 1 MiB of a 1 MiB cap
		{"unused entry set", "devices[3]", patch(good, false, put32(dev0+3*80+72, 1))},
		{"short file", "size", good[:100]},
	}
	bin := "" // without a C compiler only the Go side is checked
	if cCompiler() != "" {
		bin = buildCProgram(t)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeLimiterConfig(tc.b)
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("Go: want a *FieldError wrapping ErrMalformed, got %v", err)
			}
			if fe.Field != tc.field {
				t.Errorf("Go names field %q, want %q (%v)", fe.Field, tc.field, err)
			}
			if bin == "" || len(tc.b) != LimiterConfigSize {
				return
			}
			out, cerr := cRead(t, bin, tc.b)
			if cerr == nil || !strings.HasPrefix(out, "error: "+tc.field) {
				t.Errorf("C: want an error naming %q, got %q", tc.field, out)
			}
		})
	}
}

func TestLimiterConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*LimiterConfig)
		field string // "" = valid
	}{
		{"fixed config is valid", func(*LimiterConfig) {}, ""},
		{"policy none", func(c *LimiterConfig) { c.Policy = ComputeNone }, ""},
		{"empty policy", func(c *LimiterConfig) { c.Policy = "" }, "policy"},
		{"unknown policy", func(c *LimiterConfig) { c.Policy = "fair" }, "policy"},
		{"no devices", func(c *LimiterConfig) { c.Devices = nil }, "device_count"},
		{"17 devices", func(c *LimiterConfig) { c.Devices = make([]LimiterDevice, 17) }, "device_count"},
		{"empty pod uid", func(c *LimiterConfig) { c.PodUID = "" }, "pod_uid"},
		{"pod name of 256 bytes", func(c *LimiterConfig) { c.PodName = strings.Repeat("p", 256) }, "pod_name"},
		{"pod name of 255 bytes", func(c *LimiterConfig) { c.PodName = strings.Repeat("p", 255) }, ""},
		{"NUL in namespace", func(c *LimiterConfig) { c.PodNamespace = "a\x00b" }, "pod_namespace"},
		{"relative shared dir", func(c *LimiterConfig) { c.SharedDir = "run/vcuda" }, "shared_dir"},
		{"short uuid", func(c *LimiterConfig) { c.Devices[0].UUID = "GPU-aaa" }, "devices[0].uuid"},
		{"duplicate uuid", func(c *LimiterConfig) { c.Devices[1].UUID = c.Devices[0].UUID }, "devices[1].uuid"},
		{"no memory", func(c *LimiterConfig) { c.Devices[1].MemoryLimitBytes = 0 }, "devices[1].memory_limit"},
		{"core 0", func(c *LimiterConfig) { c.Devices[0].CorePercent = 0 }, "devices[0].core_percent"},
		{"context over the cap", func(c *LimiterConfig) { c.Devices[0].ContextMiB = uint32(c.Devices[0].MemoryLimitBytes >> 20) }, "devices[0].context_mib"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fixedLimiterConfig()
			tc.edit(&c)
			_, err := c.Encode()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("want an error on field %q, got %v", tc.field, err)
			}
		})
	}
}

func TestLimiterConfigErrorSaysWhatWasExpected(t *testing.T) {
	c := fixedLimiterConfig()
	c.Devices[0].CorePercent = 150
	_, err := c.Encode()
	want := "limiter config: field devices[0].core_percent: expected 1..100, got 150"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

// FuzzDecodeLimiterConfig: decoding never panics; whatever decodes encodes back
// to the very same bytes (the encoding is canonical) and decodes again equal.
// Inputs are 2 KiB: run it with -fuzzminimizetime 0s, minimizing them is slow.
func FuzzDecodeLimiterConfig(f *testing.F) {
	cfg := fixedLimiterConfig()
	good, err := cfg.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:LimiterConfigSize-1])
	f.Add(patch(good, false, put32(16, 3)))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeLimiterConfig(b)
		if err != nil {
			return
		}
		again, err := c.Encode()
		if err != nil {
			t.Fatalf("decoded config does not encode: %v", err)
		}
		if string(again) != string(b) {
			t.Fatalf("re-encoding changed the bytes")
		}
		c2, err := DecodeLimiterConfig(again)
		if err != nil {
			t.Fatalf("re-encoded bytes do not decode: %v", err)
		}
		if d := cmp.Diff(c, c2); d != "" {
			t.Fatalf("round trip (-first +second):\n%s", d)
		}
	})
}

func ExampleLimiterConfig_Encode() {
	c := LimiterConfig{
		Policy: ComputeFixed, PodUID: "6d1c7f0e-5a1b-4c2d-8e3f-000000000042", PodNamespace: "default",
		PodName: "infer-0", ContainerName: "server", SharedDir: "/var/run/vcuda",
		Devices: []LimiterDevice{{UUID: "GPU-8f1c2a3b-1111-4222-8333-944455566677", MemoryLimitBytes: 8 << 30, CorePercent: 30}},
	}
	b, err := c.Encode()
	fmt.Println(len(b), err)
	// Output: 2016 <nil>
}
