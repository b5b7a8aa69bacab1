package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// pair writes a CA-signed serving certificate for 127.0.0.1 named cn into
// dir as tls.crt/tls.key (through a rename, as a Secret volume's swap does)
// and returns the CA's pool.
func pair(t *testing.T, dir, cn string) *x509.CertPool {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn + "-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		tmp := filepath.Join(dir, "."+name+".new")
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool
}

// TestServingTLSReloads: a server started with one certificate serves the
// one written over it later, without a restart; a client that trusts only
// the new CA connects.
func TestServingTLSReloads(t *testing.T) {
	dir := t.TempDir()
	oldCA := pair(t, dir, "old")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := servingTLS(ctx, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	served := func(roots *x509.CertPool) (string, error) {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
	}
	if cn, err := served(oldCA); err != nil || cn != "old" {
		t.Fatalf("before the renewal: serves %q, %v; want old", cn, err)
	}

	newCA := pair(t, dir, "new")
	deadline := time.Now().Add(30 * time.Second)
	var cn string
	for cn, err = served(newCA); err != nil && time.Now().Before(deadline); cn, err = served(newCA) {
		time.Sleep(50 * time.Millisecond)
	}
	if diff := cmp.Diff("new", cn); diff != "" || err != nil {
		t.Fatalf("after the files were replaced: a client trusting only the new CA got %v (-want +got):\n%s", err, diff)
	}
	if _, err := served(oldCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client trusting only the old CA still connects (err %v): the old certificate is served", err)
	}
}

// TestServingTLSRefusesBadFiles: a missing or mismatched pair stops the start
// with the flag names.
func TestServingTLSRefusesBadFiles(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	pair(t, dir, "a")
	pair(t, other, "b")
	for _, c := range []struct{ name, cert, key, want string }{
		{name: "missing key", cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "none.key"), want: "--tls-key-file=" + filepath.Join(dir, "none.key")},
		{name: "key of another certificate", cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(other, "tls.key"), want: "--tls-cert-file=" + filepath.Join(dir, "tls.crt")},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := servingTLS(context.Background(), c.cert, c.key)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one naming %q", err, c.want)
			}
		})
	}
}
