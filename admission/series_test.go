package admission

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
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
	text := strings.Join(names, "\n") + "\n"
	path := filepath.Join("..", "installer", "testdata", "series-admission.txt")
	if *updateSeries {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want, err := os.ReadFile(path); err != nil || string(want) != text {
		t.Errorf("%s differs from what the webhook exports (%v); -update-series rewrites it:\nexported:\n%s", path, err, text)
	}
}
