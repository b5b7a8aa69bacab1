package cluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

const inotifyInstances = "/proc/sys/fs/inotify/max_user_instances"

// ensureInotify makes room for the node agents' file watchers: every device
// plugin watches its kubelet directory and vc-scheduler its configuration,
// each with its own inotify instance, and Linux's default of 128 instances
// per user is too few for a 200-node simulated cluster (or several clusters
// side by side). It raises the limit when it can and says how otherwise.
func ensureInotify(logger klog.Logger, nodes int) error {
	want := 256 + 2*nodes
	data, err := os.ReadFile(inotifyInstances)
	if err != nil {
		return nil // not Linux, or no procfs: nothing to check
	}
	have, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || have >= want {
		return nil
	}
	if err := os.WriteFile(inotifyInstances, []byte(strconv.Itoa(want)), 0o644); err != nil {
		return fmt.Errorf("%d simulated nodes need up to %d inotify instances, the limit is %d and raising it failed (%v): "+
			"run `sysctl -w fs.inotify.max_user_instances=%d` as root", nodes, want, have, err, want)
	}
	logger.Info("Raised the inotify instance limit for the node agents", "from", have, "to", want)
	return nil
}
