package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/testcerts"
)

// pair writes a CA-signed serving certificate for 127.0.0.1 named cn into
// dir as tls.crt/tls.key (through a rename, as a Secret volume's swap does)
// and returns the CA's pool.
func pair(t *testing.T, dir, cn string) *x509.CertPool {
	t.Helper()
	ca, err := testcerts.NewCA(cn+"-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(cn, time.Hour, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := testcerts.WriteSwapped(map[string][]byte{filepath.Join(dir, "tls.crt"): cert, filepath.Join(dir, "tls.key"): key}); err != nil {
		t.Fatal(err)
	}
	return ca.Pool()
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

// TestShutdownDrains: after SIGTERM the webhook answers on for the drain
// delay, each answer on a connection of its own (kube-apiserver's kept
// connection closes, so it dials again and reaches a replica its endpoints
// still list), then stops.
func TestShutdownDrains(t *testing.T) {
	var conns atomic.Int32
	handler := &drainable{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })}
	srv := httptest.NewUnstartedServer(handler)
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	get := func() error {
		resp, err := client.Get(srv.URL)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.ReadAll(resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			return fmt.Errorf("%s over %s", resp.Status, resp.Proto)
		}
		return nil
	}
	for range 3 {
		if err := get(); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("before SIGTERM: %d connections for 3 requests, want 1 kept", n)
	}
	const drain = 1500 * time.Millisecond
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- shutdown(klog.Background(), srv.Config, handler, make(chan error), drain) }()
	time.Sleep(100 * time.Millisecond)
	for i := range 3 {
		if err := get(); err != nil {
			t.Fatalf("request %d while draining: %v", i+1, err)
		}
		time.Sleep(50 * time.Millisecond) // the GOAWAY after the answer
	}
	// the kept connection answers once more, then closes; each later
	// request comes on a connection of its own
	if n := conns.Load(); n != 3 {
		t.Errorf("while draining: %d connections in all for 1 + 3 requests, want 3", n)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if took := time.Since(start); took < drain {
		t.Errorf("shut down after %v, before the drain delay %v", took, drain)
	}
	if err := get(); err == nil {
		t.Error("a request after the shutdown was answered")
	}
}

// TestShutdownKeepsIdleHTTP1Connections: kube-apiserver calls webhooks over
// HTTP/1.1 and keeps its connection. At SIGTERM the connection idles; a
// request sent on it after SIGTERM is answered, with "Connection: close",
// and then the connection closes. A server that closed its idle
// connections at SIGTERM failed such a request ("broken pipe", CI) and so
// refused a vGPU pod under failurePolicy Fail.
func TestShutdownKeepsIdleHTTP1Connections(t *testing.T) {
	handler := &drainable{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })}
	srv := httptest.NewUnstartedServer(handler)
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}, ServerName: "example.com"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	post := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pods/mutate", strings.NewReader("{}"))
		if err := req.Write(conn); err != nil {
			return nil, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(r, req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return resp, err
	}
	resp, err := post()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Close {
		t.Fatal("before SIGTERM the answer closed the connection")
	}
	const drain = time.Second
	done := make(chan error, 1)
	go func() { done <- shutdown(klog.Background(), srv.Config, handler, make(chan error), drain) }()
	time.Sleep(200 * time.Millisecond) // the connection idles after SIGTERM
	resp, err = post()
	if err != nil {
		t.Fatalf("a request on the connection kept from before SIGTERM: %v (the server closed it idle)", err)
	}
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Errorf("answer while draining: %s, Connection: close %v; want 200 OK closing the connection", resp.Status, resp.Close)
	}
	if n, err := r.ReadByte(); err == nil {
		t.Errorf("after the closing answer the connection sent %q, want it closed", n)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
