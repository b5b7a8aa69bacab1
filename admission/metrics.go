package admission

import (
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/prometheus/client_golang/prometheus"
)

// Review results, the values of the reviews counter's result label.
const (
	ResultAllowed = "allowed" // admitted unchanged
	ResultPatched = "patched" // admitted with a patch
	ResultDenied  = "denied"  // refused: a malformed request
	ResultError   = "error"   // not an AdmissionReview, or an undecodable pod
)

// Error kinds, the values of the errors counter's kind label: why a review
// was answered with result "error".
const (
	ErrorReadBody       = "read_body"       // the request body could not be read
	ErrorNotReview      = "not_review"      // the body is not an admission.k8s.io/v1 AdmissionReview
	ErrorPodDecode      = "pod_decode"      // the review's object is not a decodable pod
	ErrorPatchEncode    = "patch_encode"    // the patch could not be encoded
	ErrorResponseEncode = "response_encode" // the answer could not be encoded
)

var errorKinds = []string{ErrorReadBody, ErrorNotReview, ErrorPodDecode, ErrorPatchEncode, ErrorResponseEncode}

// Metrics count the reviews the webhook answered, how long each took and
// why the failed ones failed.
type Metrics struct {
	Reviews  *prometheus.CounterVec
	Duration prometheus.Histogram
	Errors   *prometheus.CounterVec
}

// NewMetrics registers the webhook's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "volcano_vgpu", Subsystem: "admission", Name: "reviews_total",
			Help: "Admission reviews answered, by result (allowed, patched, denied, error).",
		}, []string{"result"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "volcano_vgpu", Subsystem: "admission", Name: "request_duration_seconds",
			Help: "Time from receiving an admission request to writing its answer, errors included.",
			// The API server's webhook timeout is 10 s at most; a mutation takes well under 1 ms.
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 10},
		}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "volcano_vgpu", Subsystem: "admission", Name: "errors_total",
			Help: "Admission requests answered with an error, by kind (read_body, not_review, pod_decode, patch_encode, response_encode).",
		}, []string{"kind"}),
	}
	for _, r := range []string{ResultAllowed, ResultPatched, ResultDenied, ResultError} {
		m.Reviews.WithLabelValues(r)
	}
	for _, k := range errorKinds {
		m.Errors.WithLabelValues(k)
	}
	reg.MustRegister(m.Reviews, m.Duration, m.Errors)
	return m
}

func (m *Metrics) count(result string) {
	if m != nil {
		m.Reviews.WithLabelValues(result).Inc()
	}
}

// fail counts a request answered with an error of kind.
func (m *Metrics) fail(kind string) {
	if m != nil {
		m.Reviews.WithLabelValues(ResultError).Inc()
		m.Errors.WithLabelValues(kind).Inc()
	}
}

// observe records one request's latency since start.
func (m *Metrics) observe(start time.Time) {
	if m != nil {
		m.Duration.Observe(time.Since(start).Seconds())
	}
}

// errorKind is the errors counter's kind for a response review1 failed to
// build, "" for an admission or a denial.
func errorKind(r *admissionv1.AdmissionResponse) string {
	if r.Allowed || r.Result == nil {
		return ""
	}
	switch r.Result.Code {
	case http.StatusBadRequest:
		return ErrorPodDecode
	case http.StatusInternalServerError:
		return ErrorPatchEncode
	}
	return ""
}
