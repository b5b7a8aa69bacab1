package plugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/preloadhook"
)

// ReasonLimitsNotApplied is the reason of the Warning event on a pod whose
// container libvcuda.so cannot load into (musl-only image, static entrypoint).
const ReasonLimitsNotApplied = "GPULimitsNotApplied"

// imageReportPeriod is how often the hook's reports are looked for.
const imageReportPeriod = 10 * time.Second

// imageReportLoop reads the preload hook's reports until ctx ends.
func (p *Plugin) imageReportLoop(ctx context.Context) {
	p.every(ctx, imageReportPeriod, func() { p.ScanImageReports(ctx) })
}

// ScanImageReports reads the reports the preload hook left for allocated
// containers not seen yet (CDI mode; the hook runs when the runtime creates
// the container). A container libvcuda.so cannot load into gets a Warning
// event on its pod, a log line, and the container_unlimited gauge while it
// is allocated.
func (p *Plugin) ScanImageReports(ctx context.Context) {
	logger := klog.FromContext(ctx)
	p.mu.Lock()
	var todo []containerdir.Record
	for _, recs := range p.records {
		for _, r := range recs {
			if _, seen := p.reports[reportKey(r)]; !seen {
				todo = append(todo, r)
			}
		}
	}
	p.mu.Unlock()
	for _, r := range todo {
		paths, err := p.store.Paths(r.PodUID, r.Container)
		if err != nil {
			continue
		}
		rep, err := preloadhook.ReadReport(paths.Dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue // not created yet, or env mode
		}
		if err != nil {
			logger.Error(err, "Unreadable image report of the preload hook", "pod", klog.KRef(r.Namespace, r.Name), "container", r.Container)
			rep = preloadhook.Report{Libc: "unknown", Linking: preloadhook.LinkUnknown}
		}
		p.mu.Lock()
		if _, live := p.records[r.PodUID]; !live {
			p.mu.Unlock()
			continue
		}
		p.reports[reportKey(r)] = rep
		p.mu.Unlock()
		logger.V(4).Info("Image report", "pod", klog.KRef(r.Namespace, r.Name), "container", r.Container,
			"libc", rep.Libc, "entrypoint", rep.Entrypoint, "linking", rep.Linking, "keptPreloadEntries", rep.KeptEntries)
		msg := rep.Message(r.Container)
		if msg == "" {
			continue
		}
		logger.Info("Container runs without GPU limits", "pod", klog.KRef(r.Namespace, r.Name), "container", r.Container, "reason", rep.Unlimited, "entrypoint", rep.Entrypoint)
		if err := p.warn(ctx, r, msg); err != nil {
			logger.Error(err, "Could not post the event", "pod", klog.KRef(r.Namespace, r.Name))
		}
	}
}

func reportKey(r containerdir.Record) string { return r.PodUID + "/" + r.Container }

// warn posts a Warning event on the container's pod.
func (p *Plugin) warn(ctx context.Context, r containerdir.Record, msg string) error {
	now := metav1.NewTime(p.opts.Clock.Now())
	field := fmt.Sprintf("spec.containers{%s}", r.Container)
	if r.Init {
		field = fmt.Sprintf("spec.initContainers{%s}", r.Container)
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: r.Name + ".", Namespace: r.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: r.Namespace, Name: r.Name,
			UID: types.UID(r.PodUID), FieldPath: field},
		Reason: ReasonLimitsNotApplied, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "vgpu-device-plugin", Host: p.opts.Node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_, err := p.opts.Client.CoreV1().Events(r.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// unlimitedLocked lists the allocated containers reported unlimited.
func (p *Plugin) unlimitedLocked() []metrics.Unlimited {
	var out []metrics.Unlimited
	for _, recs := range p.records {
		for _, r := range recs {
			if rep, ok := p.reports[reportKey(r)]; ok && rep.Unlimited != "" {
				out = append(out, metrics.Unlimited{Namespace: r.Namespace, Pod: r.Name, Container: r.Container, Reason: rep.Unlimited})
			}
		}
	}
	return out
}
