package admission

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
)

var updateSeries = flag.Bool("update-series", false, "rewrite installer/testdata/series-admission.txt")

// TestSeriesList: installer/testdata/series-admission.txt lists the series
// the webhook exports, for the alert rules' check (installer/promcheck).
func TestSeriesList(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	names, err := metrics.SeriesNames(reg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "installer", "testdata", "series-admission.txt")
	if err := metrics.SeriesFile(path, names, *updateSeries); err != nil {
		t.Error(err)
	}
}
