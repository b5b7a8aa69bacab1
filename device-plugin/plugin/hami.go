package plugin

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/nodereport"
)

// hamiAnswerPeriod is how often a pending deviceshare handshake is
// answered; deviceshare waits 60s before it drops the node's GPUs. Answering
// on a period rather than on every node update avoids a patch ping-pong
// with the scheduler, which writes Requesting_ again after each answer.
const hamiAnswerPeriod = 15 * time.Second

// hamiAnnotations adds deviceshare's register annotation and a Reported
// handshake to every node report.
func (p *Plugin) hamiAnnotations(inv api.Inventory) (map[string]string, error) {
	reg, err := api.EncodeHAMiRegister(api.HAMiDevices(inv))
	if err != nil {
		return nil, err
	}
	return map[string]string{
		api.HAMiRegisterKey:  reg,
		api.HAMiHandshakeKey: api.HAMiHandshake(api.HAMiReported, p.opts.Clock.Now()),
	}, nil
}

// answerHandshake notes that deviceshare asked for (or gave up on) the node.
func (p *Plugin) answerHandshake(_ context.Context, node *corev1.Node) {
	v, ok := node.Annotations[api.HAMiHandshakeKey]
	state, _, err := api.ParseHAMiHandshake(v)
	if ok && err == nil && state == api.HAMiReported {
		return
	}
	p.mu.Lock()
	p.hamiPending = true
	p.mu.Unlock()
}

// hamiLoop answers pending handshakes every hamiAnswerPeriod.
func (p *Plugin) hamiLoop(ctx context.Context) {
	p.every(ctx, hamiAnswerPeriod, func() { p.answerHandshakePending(ctx) })
}

// answerHandshakePending publishes deviceshare's annotations when a
// handshake awaits an answer; a failed patch leaves it pending.
func (p *Plugin) answerHandshakePending(ctx context.Context) {
	p.mu.Lock()
	pending := p.hamiPending
	p.hamiPending = false
	p.mu.Unlock()
	if !pending {
		return
	}
	ann, err := p.hamiAnnotations(p.Inventory())
	if err == nil {
		err = nodereport.PatchAnnotations(ctx, p.opts.Client, p.opts.Node, ann)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Answering deviceshare's handshake")
		p.mu.Lock()
		p.hamiPending = true
		p.mu.Unlock()
		return
	}
	klog.FromContext(ctx).V(4).Info("Answered deviceshare's handshake", "node", p.opts.Node)
}
