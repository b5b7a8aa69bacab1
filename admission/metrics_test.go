package admission

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestHandlerErrorMetrics: each kind of failed request is counted under its
// kind and as an error review, and every request, failed or not, is timed.
func TestHandlerErrorMetrics(t *testing.T) {
	undecodable := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u2",` +
		`"kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{"spec":{"containers":"nope"}}}}`
	for _, tc := range []struct {
		name, body string
		kind       string
		code       int
	}{
		{name: "not a review", body: `[1,2]`, kind: ErrorNotReview, code: http.StatusBadRequest},
		{name: "review without request", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, kind: ErrorNotReview, code: http.StatusBadRequest},
		{name: "undecodable pod", body: undecodable, kind: ErrorPodDecode, code: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			h := Handler(Options{Names: names}, NewMetrics(reg))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("POST", "/pods/mutate", bytes.NewReader([]byte(tc.body))))
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
			want := `
# HELP volcano_vgpu_admission_errors_total Admission requests answered with an error, by kind (read_body, not_review, pod_decode, patch_encode, response_encode).
# TYPE volcano_vgpu_admission_errors_total counter
`
			for _, k := range []string{ErrorNotReview, ErrorPatchEncode, ErrorPodDecode, ErrorReadBody, ErrorResponseEncode} {
				v := "0"
				if k == tc.kind {
					v = "1"
				}
				want += `volcano_vgpu_admission_errors_total{kind="` + k + `"} ` + v + "\n"
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "volcano_vgpu_admission_errors_total"); err != nil {
				t.Error(err)
			}
			reviews := `
# HELP volcano_vgpu_admission_reviews_total Admission reviews answered, by result (allowed, patched, denied, error).
# TYPE volcano_vgpu_admission_reviews_total counter
volcano_vgpu_admission_reviews_total{result="allowed"} 0
volcano_vgpu_admission_reviews_total{result="denied"} 0
volcano_vgpu_admission_reviews_total{result="error"} 1
volcano_vgpu_admission_reviews_total{result="patched"} 0
`
			if err := testutil.GatherAndCompare(reg, strings.NewReader(reviews), "volcano_vgpu_admission_reviews_total"); err != nil {
				t.Error(err)
			}
			if n := testutil.CollectAndCount(reg, "volcano_vgpu_admission_request_duration_seconds"); n != 1 {
				t.Errorf("duration series: %d, want 1", n)
			}
			count := histogramCount(t, reg, "volcano_vgpu_admission_request_duration_seconds")
			if count != 1 {
				t.Errorf("requests timed: %d, want 1", count)
			}
		})
	}
}

func histogramCount(t *testing.T, g prometheus.Gatherer, name string) uint64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("%s not exported", name)
	return 0
}
