package testcerts

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestIssueVerifies: a served certificate verifies against its CA's pool
// for the names it was issued for, not for others, and the files are
// written whole, no temporary one left.
func TestIssueVerifies(t *testing.T) {
	ca, err := NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("svc", time.Hour, []net.IP{net.ParseIP("127.0.0.1")}, "svc.ns.svc")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := WriteSwapped(map[string][]byte{crt: certPEM, key: keyPEM}); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		t.Fatalf("the written pair does not load: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"127.0.0.1", true}, {"svc.ns.svc", true}, {"other.ns.svc", false}} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: tc.name})
		if (err == nil) != tc.ok {
			t.Errorf("verify for %s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	other, err := NewCA("other-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: other.Pool(), DNSName: "svc.ns.svc"}); err == nil {
		t.Error("verified against another CA")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("%d files in the directory, want tls.crt and tls.key only", len(entries))
	}
}
