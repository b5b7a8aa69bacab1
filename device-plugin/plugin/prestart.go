package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"
)

// PreStart implements dpserver.Service: the container may start only if
// kubelet's PodResources shows it holding exactly the IDs Allocate served
// it. Kubelet does not list regular init containers; for those the check is
// that kubelet lists the pod and no other pod holds any of the IDs.
func (p *Plugin) PreStart(ctx context.Context, ids []string) error {
	err := p.preStart(ctx, ids)
	if err != nil {
		p.metrics.PreStartFailures.Inc()
		klog.FromContext(ctx).Error(err, "PreStartContainer refused", "ids", ids)
	}
	return err
}

func (p *Plugin) preStart(ctx context.Context, ids []string) error {
	p.mu.Lock()
	served := p.ledger.Lookup(ids)
	p.mu.Unlock()
	if len(served) == 0 {
		return fmt.Errorf("device IDs %s were not served by this plugin's Allocate (state directory lost?); refusing to start a container with unknown limits", strings.Join(ids, ","))
	}
	if p.opts.PodResources == nil {
		return fmt.Errorf("cannot verify device IDs %s: the kubelet PodResources socket is not configured", strings.Join(ids, ","))
	}
	snap, err := p.opts.PodResources.List(ctx)
	if err != nil {
		return fmt.Errorf("cannot verify device IDs %s: %w", strings.Join(ids, ","), err)
	}
	want := slices.Sorted(slices.Values(ids))
	var problems []string
	for _, s := range served {
		containers, ok := snap.Containers(s.Namespace, s.Name)
		if !ok {
			problems = append(problems, fmt.Sprintf("kubelet does not list pod %s/%s", s.Namespace, s.Name))
			continue
		}
		if s.Init && !s.Restartable {
			others := slices.DeleteFunc(snap.Holders(ids), func(h string) bool { return strings.HasPrefix(h, s.Namespace+"/"+s.Name+"/") })
			if len(others) == 0 {
				return nil
			}
			problems = append(problems, fmt.Sprintf("init container %s/%s/%s was served %s but kubelet gave them to %s", s.Namespace, s.Name, s.Container, strings.Join(want, ","), strings.Join(others, ", ")))
			continue
		}
		got := containers[s.Container]
		if slices.Equal(got, want) {
			return nil
		}
		problems = append(problems, fmt.Sprintf("Allocate served %s to %s/%s container %s, kubelet lists it with %v", strings.Join(want, ","), s.Namespace, s.Name, s.Container, got))
	}
	return fmt.Errorf("device IDs %s do not belong to the container they were allocated for: %s", strings.Join(ids, ","), strings.Join(problems, "; "))
}
