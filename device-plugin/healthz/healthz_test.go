package healthz

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHandler(t *testing.T) {
	ok := func() error { return nil }
	tests := []struct {
		name     string
		checks   []Check
		wantCode int
		wantBody string
	}{
		{name: "no checks", wantCode: 200, wantBody: "ok\n"},
		{name: "all pass", checks: []Check{{"nvml", ok}, {"kubelet", ok}}, wantCode: 200, wantBody: "[+]nvml ok\n[+]kubelet ok\nok\n"},
		{name: "one fails: 503 naming it", checks: []Check{{"nvml", ok}, {"kubelet", func() error { return errors.New("not registered with kubelet") }}},
			wantCode: 503, wantBody: "[+]nvml ok\n[-]kubelet failed: not registered with kubelet\nunhealthy\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Handler(tc.checks...).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if rec.Code != tc.wantCode {
				t.Errorf("code = %d, want %d", rec.Code, tc.wantCode)
			}
			if d := cmp.Diff(tc.wantBody, rec.Body.String()); d != "" {
				t.Errorf("body (-want +got):\n%s", d)
			}
		})
	}
}
