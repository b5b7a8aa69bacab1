package metrics

import (
	"sort"

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
