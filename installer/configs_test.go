package installer

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	componentbaseoptions "k8s.io/component-base/config/options"
	"k8s.io/klog/v2"
	"volcano.sh/volcano/cmd/scheduler/app/options"
	"volcano.sh/volcano/pkg/scheduler/conf"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/vgpu"
)

// TestRenderedConfigs: for every value set, the device plugin accepts its
// rendered config file, vc-scheduler's vgpu plugin accepts its rendered
// arguments, and both use the same resource names.
func TestRenderedConfigs(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			objs := decode(t, mustRender(t, c.values))
			var dpNames, schedNames *vgpu.Args
			if cm := findSuffix(objs, "ConfigMap", "-device-plugin"); cm != nil {
				data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
				cfg, err := config.Parse([]byte(data))
				if err != nil {
					t.Fatalf("the device plugin refuses the rendered config: %v\n%s", err, data)
				}
				dpNames = &vgpu.Args{Resources: cfg.ResourceNames}
			}
			if cm := findSuffix(objs, "ConfigMap", "-scheduler"); cm != nil {
				data, _, _ := unstructured.NestedString(cm.Object, "data", "volcano-scheduler.conf")
				args := schedulerArgs(t, data)
				schedNames = &args
			}
			if dpNames != nil && schedNames != nil {
				if diff := cmp.Diff(dpNames.Resources, schedNames.Resources); diff != "" {
					t.Errorf("the scheduler and the device plugin use different resource names (-device plugin +scheduler):\n%s", diff)
				}
			}
		})
	}
}

// schedulerArgs decodes a volcano-scheduler.conf strictly and returns the
// vgpu plugin's parsed arguments; it fails unless vgpu is enabled once.
func schedulerArgs(t *testing.T, data string) vgpu.Args {
	t.Helper()
	var sc conf.SchedulerConfiguration
	if err := yaml.UnmarshalStrict([]byte(data), &sc); err != nil {
		t.Fatalf("volcano-scheduler.conf: %v\n%s", err, data)
	}
	warnings, err := vgpu.CheckTiers(sc.Tiers)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("the vgpu plugin refuses or warns about the configuration: %v %q\n%s", err, warnings, data)
	}
	var found []vgpu.Args
	for _, tier := range sc.Tiers {
		for _, p := range tier.Plugins {
			if p.Name != vgpu.PluginName {
				continue
			}
			a, err := vgpu.ParseArgs(p.Arguments)
			if err != nil {
				t.Fatalf("the vgpu plugin refuses its rendered arguments: %v", err)
			}
			found = append(found, a)
		}
	}
	if len(found) != 1 {
		t.Fatalf("volcano-scheduler.conf enables vgpu %d times, want once:\n%s", len(found), data)
	}
	return found[0]
}

// TestDefaultSchedulerConf: with default values the chart's configuration is
// the repository's config/scheduler/volcano-scheduler.conf (same actions,
// tiers, plugins and vgpu arguments).
func TestDefaultSchedulerConf(t *testing.T) {
	objs := decode(t, mustRender(t, ""))
	data, _, _ := unstructured.NestedString(find(t, objs, "ConfigMap", release+"-scheduler").Object, "data", "volcano-scheduler.conf")
	repo, err := os.ReadFile("../config/scheduler/volcano-scheduler.conf")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(schedulerArgs(t, string(repo)), schedulerArgs(t, data)); diff != "" {
		t.Errorf("vgpu arguments differ (-config/scheduler +chart):\n%s", diff)
	}
	var a, b conf.SchedulerConfiguration
	if err := yaml.Unmarshal(repo, &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(data), &b); err != nil {
		t.Fatal(err)
	}
	dropArgs := func(c *conf.SchedulerConfiguration) {
		for i := range c.Tiers {
			for j := range c.Tiers[i].Plugins {
				c.Tiers[i].Plugins[j].Arguments = nil
			}
		}
	}
	dropArgs(&a)
	dropArgs(&b)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("actions or tiers differ (-config/scheduler +chart):\n%s", diff)
	}
}

// TestSchedulerFlags: every flag the chart passes to vc-scheduler is one of
// its flags (registered the way cmd/vc-scheduler registers them).
func TestSchedulerFlags(t *testing.T) {
	fs := pflag.NewFlagSet("vc-scheduler", pflag.ContinueOnError)
	s := options.NewServerOption()
	s.AddFlags(fs)
	componentbaseoptions.BindLeaderElectionFlags(&s.LeaderElection, fs)
	gfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gfs)
	fs.AddGoFlagSet(gfs)
	for _, c := range goldenCases {
		objs := decode(t, mustRender(t, c.values))
		if d := findSuffix(objs, "Deployment", "-scheduler"); d != nil {
			for _, name := range containerFlags(t, d, "vc-scheduler") {
				if fs.Lookup(name) == nil {
					t.Errorf("%s: vc-scheduler has no flag --%s", c.name, name)
				}
			}
		}
	}
}

// TestDevicePluginFlags: every flag the chart passes to the device plugin is
// defined in device-plugin/app (read from its flags.go: importing the package
// would link NVML into this test, next to Volcano's use of package plugin,
// whose eager symbol binding then fails at start) or is klog's.
func TestDevicePluginFlags(t *testing.T) {
	src, err := os.ReadFile("../device-plugin/app/flags.go")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`fs\.\w+Var\(&f\.\w+, "([a-z0-9-]+)"`).FindAllStringSubmatch(string(src), -1) {
		known[m[1]] = true
	}
	gfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gfs)
	gfs.VisitAll(func(f *flag.Flag) { known[f.Name] = true })
	if !known["config"] || !known["metrics-address"] {
		t.Fatalf("read no device plugin flags from flags.go (found %v): has its flag style changed?", known)
	}
	for _, c := range goldenCases {
		objs := decode(t, mustRender(t, c.values))
		if ds := findSuffix(objs, "DaemonSet", "-device-plugin"); ds != nil {
			for _, name := range containerFlags(t, ds, "device-plugin") {
				if !known[name] {
					t.Errorf("%s: vgpu-device-plugin has no flag --%s", c.name, name)
				}
			}
		}
	}
}

// containerFlags returns the flag names in a container's args.
func containerFlags(t *testing.T, o *unstructured.Unstructured, container string) []string {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		cm := c.(map[string]any)
		if cm["name"] != container {
			continue
		}
		var names []string
		for _, a := range cm["args"].([]any) {
			name, _, _ := strings.Cut(strings.TrimLeft(a.(string), "-"), "=")
			names = append(names, name)
		}
		return names
	}
	t.Fatalf("%s %s has no container %s", o.GetKind(), o.GetName(), container)
	return nil
}

// TestDashboard: the dashboard is valid JSON with unique panel ids. Its
// queries are checked against the exported series by installer/promcheck
// (Prometheus's PromQL parser, a module of its own).
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile("helm/volcano-vgpu/dashboards/volcano-vgpu.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			ID    int    `json:"id"`
			Title string `json:"title"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	ids := map[int]string{}
	for _, p := range dash.Panels {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
	}
}

// findSuffix returns the object of that kind whose name ends with suffix
// (any fullnameOverride), or nil.
func findSuffix(objs []*unstructured.Unstructured, kind, suffix string) *unstructured.Unstructured {
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool {
		return o.GetKind() == kind && strings.HasSuffix(o.GetName(), suffix)
	})
	if i < 0 {
		return nil
	}
	return objs[i]
}

func findOptional(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind && o.GetName() == name })
	if i < 0 {
		return nil
	}
	return objs[i]
}

// TestAdmissionCertificate: with the default values Helm makes the webhook's
// CA and serving certificate; kube-apiserver (trusting the configuration's
// caBundle) accepts the certificate for the webhook Service's name, and the
// Deployment mounts that Secret.
func TestAdmissionCertificate(t *testing.T) {
	objs := decode(t, mustRender(t, ""))
	name := release + "-admission"
	secret := findOptional(objs, "Secret", name+"-tls")
	hook := findOptional(objs, "MutatingWebhookConfiguration", name)
	deploy := findOptional(objs, "Deployment", name)
	if secret == nil || hook == nil || deploy == nil {
		t.Fatalf("default values render the webhook's Secret, configuration and Deployment: %v, %v, %v", secret != nil, hook != nil, deploy != nil)
	}
	hooks, _, _ := unstructured.NestedSlice(hook.Object, "webhooks")
	caB64, _, _ := unstructured.NestedString(hooks[0].(map[string]any), "clientConfig", "caBundle")
	certB64, _, _ := unstructured.NestedString(secret.Object, "data", "tls.crt")
	pemOf := func(what, b64 string) *x509.Certificate {
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		block, _ := pem.Decode(raw)
		if block == nil {
			t.Fatalf("%s: no PEM block", what)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return c
	}
	ca, cert := pemOf("caBundle", caB64), pemOf("tls.crt", certB64)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	dns := name + "." + namespace + ".svc"
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: dns}); err != nil {
		t.Errorf("the serving certificate does not verify for %s against the caBundle: %v", dns, err)
	}
	vols, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "volumes")
	if got, _, _ := unstructured.NestedString(vols[0].(map[string]any), "secret", "secretName"); got != name+"-tls" {
		t.Errorf("the Deployment mounts secret %q, want %s-tls", got, name)
	}
}
