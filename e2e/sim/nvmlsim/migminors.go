package nvmlsim

import (
	"fmt"
	"strings"
)

// MIG capability minors, as the NVIDIA driver lists them in
// /proc/driver/nvidia-caps/mig-minors: config 1, monitor 2, then for each
// GPU minor g (0 to 31) and GPU instance ID i (0 to 14) its access
// capability followed by the access capabilities of compute instances 0 to
// 7 (9 minors per GPU instance, 135 per GPU).
const (
	migMinorGPUs    = 32
	migMinorGIs     = 15
	migMinorCIs     = 8
	migMinorsPerGPU = migMinorGIs * (1 + migMinorCIs)
)

// MIGMinor is the capability minor of GPU minor g's GPU instance gi (ci <
// 0) or of its compute instance ci, as the driver numbers them.
func MIGMinor(g, gi, ci int) int {
	m := 3 + g*migMinorsPerGPU + gi*(1+migMinorCIs)
	if ci >= 0 {
		m += 1 + ci
	}
	return m
}

// MIGMinors is the text of the driver's mig-minors file (the same on every
// node: it lists every GPU minor the driver supports). The simulated
// cluster writes it in each node's directory for its device plugin.
func MIGMinors() string {
	var b strings.Builder
	b.WriteString("config 1\nmonitor 2\n")
	for g := range migMinorGPUs {
		for gi := range migMinorGIs {
			fmt.Fprintf(&b, "gpu%d/gi%d/access %d\n", g, gi, MIGMinor(g, gi, -1))
			for ci := range migMinorCIs {
				fmt.Fprintf(&b, "gpu%d/gi%d/ci%d/access %d\n", g, gi, ci, MIGMinor(g, gi, ci))
			}
		}
	}
	return b.String()
}
