package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fakeInputs writes small stand-ins for the binaries and the two Debian
// packages' data.
func fakeInputs(t *testing.T) Inputs {
	t.Helper()
	d := t.TempDir()
	bin := filepath.Join(d, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"vc-scheduler", "vgpu-admission", "vgpu-device-plugin", "vgpu-cdi-hook", "libvcuda.so"} {
		if err := os.WriteFile(filepath.Join(bin, n), []byte("binary "+n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	libc := writeTar(t, filepath.Join(d, "libc6.tar"), map[string]string{
		"./lib/x86_64-linux-gnu/libc.so.6":            "libc",
		"./lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": "loader",
		"./usr/lib/x86_64-linux-gnu/gconv/BIG5.so":    "gconv",
		"./usr/share/doc/libc6/copyright":             "doc",
		"./etc/ld.so.conf.d/x86_64-linux-gnu.conf":    "/lib/x86_64-linux-gnu\n",
	})
	certs := writeTar(t, filepath.Join(d, "ca.tar"), map[string]string{
		"./usr/share/ca-certificates/mozilla/B.crt": "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n",
		"./usr/share/ca-certificates/mozilla/A.crt": "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----",
	})
	return Inputs{Bin: bin, Libc6: libc, Libc6Version: "2.36-test", CACerts: certs, CACertsVersion: "1-test"}
}

func writeTar(t *testing.T, p string, files map[string]string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for n, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(data))
	}
	tw.Close()
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReproducible: two builds from the same inputs have the same digests
// (tarball files byte for byte); another SOURCE_DATE_EPOCH gives others.
func TestReproducible(t *testing.T) {
	in := fakeInputs(t)
	digests := func(epoch int64) map[string]string {
		t.Helper()
		ss, err := specs(in)
		if err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		got := map[string]string{}
		for _, s := range ss {
			img, err := build(s, "amd64", epoch)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := name.NewTag("volcano-vgpu/" + s.name + ":test")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := write(out, s.name, ref, img); err != nil {
				t.Fatal(err)
			}
			back, err := tarball.ImageFromPath(filepath.Join(out, s.name+".tar"), nil)
			if err != nil {
				t.Fatal(err)
			}
			d, err := back.Digest()
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(out, s.name+".tar"))
			if err != nil {
				t.Fatal(err)
			}
			got[s.name] = d.String() + " " + string(raw)
		}
		return got
	}
	first, second, later := digests(0), digests(0), digests(1700000000)
	if len(first) != 2 {
		t.Fatalf("built %d images, want 2", len(first))
	}
	for n := range first {
		if first[n] != second[n] {
			t.Errorf("%s: two builds from the same inputs differ", n)
		}
		if first[n] == later[n] {
			t.Errorf("%s: another SOURCE_DATE_EPOCH gave the same image; the time stamp is not applied", n)
		}
	}
}

// TestSpecsRefuseWrongInputs: inputs that are not what make images hands
// over are refused with the file named.
func TestSpecsRefuseWrongInputs(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(in *Inputs)
		wantErr string
	}{
		{name: "libc6 tar without a loader", mutate: func(in *Inputs) { in.Libc6 = in.CACerts }, wantErr: "no dynamic loader"},
		{name: "ca-certificates tar without certificates", mutate: func(in *Inputs) { in.CACerts = in.Libc6 }, wantErr: "holds no certificate"},
		{name: "binary missing", mutate: func(in *Inputs) { os.Remove(filepath.Join(in.Bin, "vgpu-cdi-hook")) }, wantErr: "vgpu-cdi-hook"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := fakeInputs(t)
			tc.mutate(&in)
			_, err := specs(in)
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.wantErr)) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
