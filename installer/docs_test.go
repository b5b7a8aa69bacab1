package installer

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// installGuide is the real-cluster guide; every chart key it names, in
// backquotes or after --set, must be a key of the chart it belongs to.
const installGuide = "../docs/install.md"

// freeFormMaps are values whose keys are the user's (labels), so a key
// below them is not looked up.
func freeFormMaps() []string {
	return []string{"devicePlugin.nodeSelector", "scheduler.nodeSelector"}
}

// TestInstallGuideKeys: each key docs/install.md names under our chart's
// top-level keys exists in installer/helm/volcano-vgpu/values.yaml, and each
// under Volcano's (custom., basic.) in Volcano's chart values of the module
// version go.mod pins. Keys of other charts (the GPU Operator's) are not
// checked.
func TestInstallGuideKeys(t *testing.T) {
	guide, err := os.ReadFile(installGuide)
	if err != nil {
		t.Fatal(err)
	}
	ours := readValues(t, filepath.Join(chartDir, "values.yaml"))
	volcano := readValues(t, volcanoValues(t))
	checked := 0
	for _, key := range guideKeys(string(guide)) {
		top := strings.SplitN(key, ".", 2)[0]
		var values map[string]any
		var chart string
		switch {
		case ours[top] != nil || top == "imageRegistry":
			values, chart = ours, chartDir+"/values.yaml"
		case top == "custom" || top == "basic":
			values, chart = volcano, "Volcano's chart values.yaml"
		default:
			continue
		}
		checked++
		t.Logf("%s: %s", chart, key)
		if !hasKey(values, key) {
			t.Errorf("docs/install.md names %s, which is not a key of %s: fix the guide or the chart", key, chart)
		}
	}
	if checked < 10 {
		t.Errorf("checked %d keys of docs/install.md, want at least 10: the pattern no longer finds them", checked)
	}
}

// guideKeys are the dotted keys doc names in backquotes or after --set, with
// an optional "=value" or ".*" tail.
func guideKeys(doc string) []string {
	re := regexp.MustCompile("(?:`|--set )([A-Za-z][A-Za-z0-9_]*(?:\\.[A-Za-z0-9_/-]+)+)(?:=|:|\\.\\*|`| )")
	seen := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(doc, -1) {
		seen[m[1]] = true
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// hasKey walks values along key's dotted path; below a free-form map any
// key is accepted.
func hasKey(values map[string]any, key string) bool {
	parts := strings.Split(key, ".")
	cur := values
	for i, p := range parts {
		for _, f := range freeFormMaps() {
			if strings.Join(parts[:i], ".") == f {
				return true
			}
		}
		v, ok := cur[p]
		if !ok {
			return false
		}
		if i == len(parts)-1 {
			return true
		}
		next, ok := v.(map[string]any)
		if !ok {
			return false
		}
		cur = next
	}
	return true
}

func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// volcanoValues is Volcano's chart values.yaml in the module cache, at the
// version go.mod requires.
func volcanoValues(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "volcano.sh/volcano").Output()
	if err != nil {
		t.Fatalf("go list -m volcano.sh/volcano: %v (go mod download fetches it)", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "installer/helm/chart/volcano/values.yaml")
}

func TestHasKey(t *testing.T) {
	values := map[string]any{
		"devicePlugin": map[string]any{"config": map[string]any{"cdi": map[string]any{"enabled": true}}, "nodeSelector": map[string]any{}},
		"custom":       map[string]any{"scheduler_name": nil},
	}
	tests := []struct {
		name string
		key  string
		want bool
	}{
		{name: "nested key", key: "devicePlugin.config.cdi.enabled", want: true},
		{name: "key with a null value", key: "custom.scheduler_name", want: true},
		{name: "missing leaf", key: "devicePlugin.config.cdi.kind", want: false},
		{name: "below a scalar", key: "devicePlugin.config.cdi.enabled.x", want: false},
		{name: "label below a free-form map", key: "devicePlugin.nodeSelector.volcano-vgpu/enabled", want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := hasKey(values, tc.key); got != tc.want {
				t.Errorf("hasKey(%s) = %v, want %v", tc.key, got, tc.want)
			}
		})
	}
}
