package metrics

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// SeriesNames lists the sample names g exposes, sorted: a histogram family
// gives its _bucket, _sum and _count names. The alert rules and the dashboard
// are checked against these lists (installer/testdata/series-*.txt).
func SeriesNames(g prometheus.Gatherer) ([]string, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range families {
		n := f.GetName()
		switch f.GetType().String() { // client_model's MetricType names
		case "HISTOGRAM", "GAUGE_HISTOGRAM":
			out = append(out, n+"_bucket", n+"_sum", n+"_count")
		case "SUMMARY":
			out = append(out, n, n+"_sum", n+"_count")
		default:
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// SeriesFile keeps a series list (installer/testdata/series-*.txt, one name
// a line) in step with names: with update it writes the file, else it says
// how the file and names differ (nil when they do not). The tests that keep
// the lists call it with their -update-series flag.
func SeriesFile(path string, names []string, update bool) error {
	text := strings.Join(names, "\n") + "\n"
	if update {
		return os.WriteFile(path, []byte(text), 0o644)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w (-update-series writes it)", err)
	}
	if string(b) == text {
		return nil
	}
	inFile := map[string]bool{}
	for _, n := range strings.Fields(string(b)) {
		inFile[n] = true
	}
	var gone, added []string
	for _, n := range names {
		if !inFile[n] {
			added = append(added, n)
		}
		delete(inFile, n)
	}
	for n := range inFile {
		gone = append(gone, n)
	}
	sort.Strings(gone)
	return fmt.Errorf("%s differs from the series exported: not exported %v, not listed %v (order or spacing if both are empty); -update-series rewrites it", path, gone, added)
}
