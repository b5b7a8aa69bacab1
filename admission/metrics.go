package admission

import "github.com/prometheus/client_golang/prometheus"

// Review results, the values of the reviews counter's result label.
const (
	ResultAllowed = "allowed" // admitted unchanged
	ResultPatched = "patched" // admitted with a patch
	ResultDenied  = "denied"  // refused: a malformed request
	ResultError   = "error"   // not an AdmissionReview, or an undecodable pod
)

// Metrics count the reviews the webhook answered.
type Metrics struct {
	Reviews *prometheus.CounterVec
}

// NewMetrics registers the webhook's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{Reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "volcano_vgpu", Subsystem: "admission", Name: "reviews_total",
		Help: "Admission reviews answered, by result (allowed, patched, denied, error).",
	}, []string{"result"})}
	for _, r := range []string{ResultAllowed, ResultPatched, ResultDenied, ResultError} {
		m.Reviews.WithLabelValues(r)
	}
	reg.MustRegister(m.Reviews)
	return m
}

func (m *Metrics) count(result string) {
	if m != nil {
		m.Reviews.WithLabelValues(result).Inc()
	}
}
