package promcheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const chart = "../helm/volcano-vgpu"

// exported is every series name of installer/testdata/series-*.txt (written
// by the device plugin's and the webhook's own tests from their registries)
// plus Prometheus's own.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../testdata/series-*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no series lists under installer/testdata (%v)", err)
	}
	out := map[string]bool{"up": true}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range strings.Fields(string(b)) {
			out[n] = true
		}
	}
	return out
}

type rule struct {
	Alert, Record, Expr string
	For                 string
	Labels, Annotations map[string]string
}

// TestRules: every alert rule parses, names only exported series, and has a
// severity and a summary.
func TestRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chart, "rules", "volcano-vgpu.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string
			Rules []rule
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	have := exported(t)
	n := 0
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			n++
			names, err := Selected(r.Expr)
			if err != nil {
				t.Errorf("rule %s: %v", r.Alert, err)
				continue
			}
			for _, m := range names {
				if !have[m] {
					t.Errorf("rule %s selects %s, which nothing exports", r.Alert, m)
				}
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %s: needs a severity label and a summary", r.Alert)
			}
		}
	}
	if n < 5 {
		t.Errorf("%d rules, want at least the five of the chart's README", n)
	}
}

// TestDashboard: every panel query and template variable query of the
// dashboard parses (Grafana's variables replaced) and names only exported
// series.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chart, "dashboards", "volcano-vgpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	have := exported(t)
	check := func(where, expr string) {
		names, err := Selected(Grafana(expr))
		if err != nil {
			t.Errorf("%s: %q: %v", where, expr, err)
			return
		}
		for _, m := range names {
			if !have[m] {
				t.Errorf("%s selects %s, which nothing exports", where, m)
			}
		}
	}
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			if q.Expr != "" {
				check("panel "+p.Title, q.Expr)
			}
		}
	}
	for _, v := range dash.Templating.List {
		q, ok := v.Query.(map[string]any)
		if !ok {
			continue
		}
		s, _ := q["query"].(string)
		// label_values(<selector>, label): the selector is PromQL
		if inner, ok := strings.CutPrefix(s, "label_values("); ok {
			i := strings.LastIndex(inner, ",")
			check("variable "+v.Name, inner[:i])
		}
	}
}

func TestSelected(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       []string
		wantErr    bool
	}{
		{name: "ratio", expr: `a_bytes / on (x) b_bytes > 0.9`, want: []string{"a_bytes", "b_bytes"}},
		{name: "rate in a sum", expr: `sum by (r) (rate(c_total{r="x"}[5m]))`, want: []string{"c_total"}},
		{name: "grafana variables", expr: Grafana(`rate(c_total{node=~"$node"}[$__rate_interval])`), want: []string{"c_total"}},
		{name: "syntax error", expr: `sum(rate(c_total[5m])`, wantErr: true},
		{name: "no metric name", expr: `{job="x"}`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Selected(tc.expr)
			if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
				t.Errorf("Selected(%q) = %v, %v; want %v (error %v)", tc.expr, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
