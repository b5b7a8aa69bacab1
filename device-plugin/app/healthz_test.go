package app

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type fakeChecker struct{ live, nvml, registered error }

func (f fakeChecker) Live() error       { return f.live }
func (f fakeChecker) NVMLReady() error  { return f.nvml }
func (f fakeChecker) Registered() error { return f.registered }

func TestHealthEndpoints(t *testing.T) {
	errKubelet := errors.New("not registered with kubelet: /var/lib/kubelet/device-plugins/kubelet.sock")
	errNVML := errors.New("NVML has not answered for 3m0s")
	tests := []struct {
		name    string
		checker fakeChecker
		want    map[string]int // path → status
		says    string         // in the body of every failing endpoint
	}{
		{name: "all well", want: map[string]int{"/livez": 200, "/readyz": 200, "/healthz": 200}},
		{name: "kubelet restarting: not ready, still live", checker: fakeChecker{registered: errKubelet},
			want: map[string]int{"/livez": 200, "/readyz": 503, "/healthz": 503}, says: "kubelet registration failed: not registered"},
		{name: "NVML silent: not ready", checker: fakeChecker{nvml: errNVML},
			want: map[string]int{"/livez": 200, "/readyz": 503, "/healthz": 503}, says: "NVML failed: NVML has not answered"},
		{name: "health loops stalled: not live", checker: fakeChecker{live: errors.New("health loop stalled")},
			want: map[string]int{"/livez": 503, "/readyz": 200, "/healthz": 503}, says: "health loops failed: health loop stalled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(Mux(prometheus.NewRegistry(), tc.checker))
			defer srv.Close()
			for path, code := range tc.want {
				resp, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body := string(b)
				if resp.StatusCode != code {
					t.Errorf("%s: %d, want %d\n%s", path, resp.StatusCode, code, body)
				}
				if code != 200 && !strings.Contains(body, tc.says) {
					t.Errorf("%s: body %q does not say %q", path, body, tc.says)
				}
			}
		})
	}
}
