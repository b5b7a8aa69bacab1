package plugin

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/preloadhook"
)

func TestImageReports(t *testing.T) {
	state := t.TempDir()
	e := newEnvWith(t, state, nil)
	e.add(t, pod("static").app("main", share(0)).obj(t, e), pod("fine").app("main", share(1)).obj(t, e), pod("pending").app("main", share(2)).obj(t, e))
	for i, name := range []string{"static", "fine", "pending"} {
		e.kubelet.set(name, map[string][]string{"main": nil})
		if _, err := e.p.Allocate(context.Background(), []string{e.id(i, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	// What the hook left when the runtime created two of the containers; the third is not created yet.
	for name, rep := range map[string]preloadhook.Report{
		"static": {Version: preloadhook.ReportVersion, Libc: "glibc", Entrypoint: "/app", Linking: preloadhook.LinkStatic, Unlimited: preloadhook.UnlimitedStatic},
		"fine":   {Version: preloadhook.ReportVersion, Libc: "glibc", Entrypoint: "/usr/bin/python3", Linking: preloadhook.LinkDynamic, KeptEntries: 1},
	} {
		if err := preloadhook.WriteReport(state+"/containers/uid-"+name+"/main/ld.so.preload", rep); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	e.p.ScanImageReports(ctx)
	e.p.ScanImageReports(ctx) // seen: no second event

	evs, err := e.client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 {
		t.Fatalf("events = %+v, want one for pod static", evs.Items)
	}
	ev := evs.Items[0]
	if ev.InvolvedObject.Name != "static" || ev.InvolvedObject.UID != "uid-static" || ev.InvolvedObject.FieldPath != "spec.containers{main}" ||
		ev.Reason != ReasonLimitsNotApplied || ev.Type != "Warning" ||
		ev.Message != "container main: its entrypoint /app is statically linked, so no library is preloaded into it: its GPU memory and compute are not limited; link it dynamically against glibc" {
		t.Errorf("event = %+v", ev)
	}
	if d := cmp.Diff([]metrics.Unlimited{{Namespace: "ns", Pod: "static", Container: "main", Reason: "static"}}, e.p.snapshot().Unlimited); d != "" {
		t.Errorf("unlimited gauge (-want +got):\n%s", d)
	}
	e.p.deletePod("uid-static")
	if got := e.p.snapshot().Unlimited; len(got) != 0 {
		t.Errorf("unlimited after the pod was deleted = %v", got)
	}
}
