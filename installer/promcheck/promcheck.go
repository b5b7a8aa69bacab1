// Package promcheck parses PromQL expressions with Prometheus's parser and
// names the series they select, so the chart's alert rules and dashboard can
// be checked against the series volcano-vgpu exports.
package promcheck

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// grafanaVars are Grafana's variables, replaced by values PromQL accepts
// before parsing: ranges by a duration, the rest inside label matchers.
var grafanaVars = regexp.MustCompile(`\$(__rate_interval|__interval|__range|[a-z_]+)|\$\{[a-z_]+\}`)

// Grafana makes a dashboard expression parseable: $__rate_interval and the
// other range variables become 5m, other variables (only inside label
// matchers' strings) become ".*".
func Grafana(expr string) string {
	return grafanaVars.ReplaceAllStringFunc(expr, func(v string) string {
		switch strings.Trim(v, "${}") {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		}
		return ".*"
	})
}

// Selected parses expr and returns the metric names its selectors name.
// A selector without a metric name is an error: every expression of ours
// names its series.
func Selected(expr string) ([]string, error) {
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				bad = fmt.Errorf("selector %s names no metric", vs)
				return bad
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, bad
}
