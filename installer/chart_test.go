package installer

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/volcano-vgpu/volcano-vgpu/admission"
	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/vgpu"
)

// TestAdmissionAvailability: by default the webhook runs 2 replicas that
// prefer different nodes, a PodDisruptionBudget keeps one, and only vGPU
// pods are sent to it (the Go MatchConditions, for the default and for
// custom resource names), with the opt-out label honoured on namespaces and pods.
func TestAdmissionAvailability(t *testing.T) {
	name := release + "-admission"
	for _, c := range []struct {
		values string
		names  api.ResourceNames
	}{
		{values: "", names: api.DefaultResourceNames()},
		{values: "testdata/custom.values.yaml", names: api.ResourceNames{Number: "vgpu.example/number", Memory: "vgpu.example/memory",
			MemoryPercentage: "vgpu.example/memory-percentage", Cores: "vgpu.example/cores"}},
	} {
		t.Run("values "+c.values, func(t *testing.T) {
			objs := decode(t, mustRender(t, c.values))
			deploy := find(t, objs, "Deployment", name)
			if r, _, _ := unstructured.NestedFieldNoCopy(deploy.Object, "spec", "replicas"); fmt.Sprint(r) != "2" {
				t.Errorf("webhook replicas = %v, want 2", r)
			}
			terms, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
			if len(terms) != 1 {
				t.Errorf("webhook pod anti-affinity terms = %v, want one on kubernetes.io/hostname", terms)
			}
			pdb := find(t, objs, "PodDisruptionBudget", name)
			if m, _, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable"); fmt.Sprint(m) != "1" {
				t.Errorf("PodDisruptionBudget minAvailable = %v, want 1", m)
			}
			hooks, _, _ := unstructured.NestedSlice(find(t, objs, "MutatingWebhookConfiguration", name).Object, "webhooks")
			hook := hooks[0].(map[string]any)
			var got []map[string]any
			for _, mc := range hook["matchConditions"].([]any) {
				got = append(got, mc.(map[string]any))
			}
			var want []map[string]any
			for _, mc := range admission.MatchConditions(c.names) {
				want = append(want, map[string]any{"name": mc.Name, "expression": mc.Expression})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("matchConditions differ from admission.MatchConditions (-Go +chart):\n%s", diff)
			}
			optOut := map[string]any{"key": api.AdmissionOptOutLabel, "operator": "NotIn", "values": []any{api.AdmissionOptOutValue}}
			for _, sel := range []string{"objectSelector", "namespaceSelector"} {
				exprs, _, _ := unstructured.NestedSlice(hook, sel, "matchExpressions")
				found := false
				for _, e := range exprs {
					found = found || cmp.Equal(e, any(optOut))
				}
				if !found {
					t.Errorf("%s %v lacks the opt-out %v", sel, exprs, optOut)
				}
			}
		})
	}
	objs := decode(t, mustRender(t, "", "admission.replicas=1"))
	if pdb := findOptional(objs, "PodDisruptionBudget", name); pdb != nil {
		t.Error("one replica renders a PodDisruptionBudget with minAvailable 1: it would block every drain")
	}
}

// TestBounds: each bounded setting rendered at its limits is accepted by the
// binary it configures (config.Parse for the device plugin, vgpu.ParseArgs
// for the scheduler); just past them the chart refuses it, and so does the
// binary, given the same value.
func TestBounds(t *testing.T) {
	defaults := decode(t, mustRender(t, ""))
	dpData, _, _ := unstructured.NestedString(find(t, defaults, "ConfigMap", release+"-device-plugin").Object, "data", "config.yaml")
	for _, c := range []struct {
		key, value string // a values path and a --set value
		ok         bool
	}{
		{"scheduler.vgpu.staleAfter", "10s", true},
		{"scheduler.vgpu.staleAfter", "1h30m", true},
		{"scheduler.vgpu.staleAfter", "9999ms", false},
		{"scheduler.vgpu.staleAfter", "1s", false},
		{"scheduler.vgpu.weight", "0", true},
		{"scheduler.vgpu.weight", "1000", true},
		{"scheduler.vgpu.weight", "1000.5", false},
		{"scheduler.vgpu.defaultCores", "100", true},
		{"scheduler.vgpu.defaultCores", "101", false},
		{"devicePlugin.config.maxShares", "1", true},
		{"devicePlugin.config.maxShares", "100", true},
		{"devicePlugin.config.maxShares", "101", false},
		{"devicePlugin.config.limiter.contextMiB.H100", "520", true},
		{"devicePlugin.config.limiter.contextMiB.default", "0", true},
		{"devicePlugin.config.limiter.contextMiB.A100", "16384", true},
		{"devicePlugin.config.limiter.contextMiB.A100", "16385", false},
		{"devicePlugin.config.health.probeInterval", "1s", true},
		{"devicePlugin.config.health.probeInterval", "10m", true},
		{"devicePlugin.config.health.probeInterval", "999ms", false},
		{"devicePlugin.config.health.probeInterval", "10m1s", false},
		{"devicePlugin.config.report.heartbeatPeriod", "1s", true},
		{"devicePlugin.config.report.heartbeatPeriod", "500ms", false},
		{"devicePlugin.config.allocate.gcPeriod", "1s", true},
		{"devicePlugin.config.allocate.gcPeriod", "999ms", false},
		{"devicePlugin.config.allocate.assignmentWait", "0s", true},
		{"devicePlugin.config.health.recoveryPeriod", "0s", true},
	} {
		t.Run(c.key+"="+c.value, func(t *testing.T) {
			out, err := render(t, nil, c.key+"="+c.value)
			if c.ok {
				if err != nil {
					t.Fatalf("the chart refuses a value its binary accepts: %v", err)
				}
				objs := decode(t, out)
				if dpKey, ok := strings.CutPrefix(c.key, "devicePlugin.config."); ok {
					data, _, _ := unstructured.NestedString(find(t, objs, "ConfigMap", release+"-device-plugin").Object, "data", "config.yaml")
					if !strings.Contains(data, lastKey(dpKey)+": ") {
						t.Fatalf("the rendered config does not carry %s:\n%s", dpKey, data)
					}
					if _, err := config.Parse([]byte(data)); err != nil {
						t.Errorf("the device plugin refuses the rendered config: %v", err)
					}
					return
				}
				data, _, _ := unstructured.NestedString(find(t, objs, "ConfigMap", release+"-scheduler").Object, "data", "volcano-scheduler.conf")
				schedulerArgs(t, data) // fails on a refusal
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.key) {
				t.Errorf("the chart renders (or refuses without naming %s): %v", c.key, err)
			}
			if err := binaryVerdict(t, dpData, c.key, c.value); err == nil {
				t.Errorf("the binary accepts %s=%s, which the chart refuses", c.key, c.value)
			}
		})
	}
}

func lastKey(path string) string { return path[strings.LastIndex(path, ".")+1:] }

// binaryVerdict feeds one value to the binary's own validation: the vgpu
// plugin's arguments alone, or the default rendered device plugin config
// with the value set at its path.
func binaryVerdict(t *testing.T, dpData, key, value string) error {
	t.Helper()
	var v any
	if err := sigsyaml.Unmarshal([]byte(value), &v); err != nil {
		t.Fatal(err)
	}
	if arg, ok := strings.CutPrefix(key, "scheduler.vgpu."); ok {
		_, err := vgpu.ParseArgs(map[string]any{"vgpu." + arg: v})
		return err
	}
	dpKey, ok := strings.CutPrefix(key, "devicePlugin.config.")
	if !ok {
		t.Fatalf("no binary validates %s", key)
	}
	var cfg map[string]any
	if err := sigsyaml.Unmarshal([]byte(dpData), &cfg); err != nil {
		t.Fatal(err)
	}
	m := cfg
	parts := strings.Split(dpKey, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
	raw, err := sigsyaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.Parse(raw)
	return err
}

// TestREADMESettings: every chart setting the user's documents name (README
// and the install guide: a values path in backquotes, with or without a
// value) is a setting of the chart: it renders.
func TestREADMESettings(t *testing.T) {
	var readme []byte
	for _, f := range []string{"../README.md", installGuide} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		readme = append(append(readme, b...), '\n')
	}
	re := regexp.MustCompile("`(?:--set )?((?:scheduler|devicePlugin|admission|assignmentPolicy|metrics|hostPaths|resourceNames|global)\\.[A-Za-z0-9_.]+)(?:[=:] ?([^`]*))?`")
	var values map[string]any
	raw, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(string(readme), -1) {
		path := m[1]
		if seen[path] {
			continue
		}
		seen[path] = true
		def, open, ok := lookupPath(values, path)
		if !ok {
			t.Errorf("README or docs/install.md names %s, which values.yaml does not hold", path)
			continue
		}
		value := fmt.Sprint(def)
		switch def.(type) {
		case map[string]any, []any:
			continue // a group, or a list README does not set
		}
		if open { // a key under a map that is empty by default: README's example value
			if value = strings.TrimSpace(m[2]); value == "" {
				continue
			}
		}
		// The default (or README's example), set explicitly, renders: the chart knows the key.
		// --set splits at commas: a list-like default ("enqueue, allocate") is one string
		if _, err := render(t, nil, path+"="+strings.ReplaceAll(value, ",", `\,`)); err != nil {
			t.Errorf("README or docs/install.md names %s; setting it renders no chart: %v", path, err)
		}
	}
	if len(seen) < 10 {
		t.Fatalf("found only %d settings in README and docs/install.md: has their style changed?", len(seen))
	}
}

// lookupPath finds a dotted path in values and its default; a key under a
// map that is empty by default (contextMiB, nodeSelector) is a setting too
// (open).
func lookupPath(values map[string]any, path string) (def any, open, ok bool) {
	var cur any = values
	for _, p := range strings.Split(path, ".") {
		m, isMap := cur.(map[string]any)
		if !isMap {
			return nil, false, false
		}
		if len(m) == 0 {
			return nil, true, true
		}
		if cur, ok = m[p]; !ok {
			return nil, false, false
		}
	}
	return cur, false, true
}

// TestPodSecurity: every pod the chart renders runs under the runtime's
// default seccomp profile, and the device plugin mounts the CDI spec
// directory only in CDI mode.
func TestPodSecurity(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			for _, o := range decode(t, mustRender(t, c.values)) {
				if _, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec"); !ok {
					continue
				}
				if p, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "securityContext", "seccompProfile", "type"); p != "RuntimeDefault" {
					t.Errorf("%s %s: pod seccompProfile %q, want RuntimeDefault", o.GetKind(), o.GetName(), p)
				}
			}
		})
	}
	for _, c := range []struct {
		set  string
		want bool
	}{{"devicePlugin.config.cdi.enabled=true", true}, {"devicePlugin.config.cdi.enabled=false", false}} {
		objs := decode(t, mustRender(t, "", c.set))
		vols, _, _ := unstructured.NestedSlice(find(t, objs, "DaemonSet", release+"-device-plugin").Object, "spec", "template", "spec", "volumes")
		got := false
		for _, v := range vols {
			got = got || v.(map[string]any)["name"] == "cdi"
		}
		if got != c.want {
			t.Errorf("%s: the CDI spec directory mounted = %t, want %t", c.set, got, c.want)
		}
	}
}

// TestNames: nameOverride and fullnameOverride rename every object.
func TestNames(t *testing.T) {
	for _, c := range []struct {
		set, wantPrefix string
	}{
		{"nameOverride=gpuset", release + "-gpuset-"},
		{"fullnameOverride=acme-vgpu", "acme-vgpu-"},
	} {
		for _, o := range decode(t, mustRender(t, "", c.set)) {
			if !strings.HasPrefix(o.GetName(), c.wantPrefix) {
				t.Errorf("%s: %s %s does not start with %s", c.set, o.GetKind(), o.GetName(), c.wantPrefix)
			}
		}
	}
	if _, err := render(t, nil, "fullnameOverride=Acme_VGPU"); err == nil || !strings.Contains(err.Error(), "fullnameOverride must be a DNS label") {
		t.Errorf("fullnameOverride Acme_VGPU: %v, want a refusal naming the rule", err)
	}
}
