// Command vc-scheduler is Volcano's scheduler (v1.14.1) with the vgpu session
// plugin compiled in. Flags and configuration are Volcano's own; enable the
// plugin by listing "vgpu" in a tier of the scheduler configuration.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	_ "go.uber.org/automaxprocs"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	cliflag "k8s.io/component-base/cli/flag"
	componentbaseoptions "k8s.io/component-base/config/options"
	"k8s.io/klog/v2"

	"volcano.sh/volcano/cmd/scheduler/app"
	"volcano.sh/volcano/cmd/scheduler/app/options"
	"volcano.sh/volcano/pkg/scheduler"
	"volcano.sh/volcano/pkg/scheduler/framework"
	commonutil "volcano.sh/volcano/pkg/util"
	"volcano.sh/volcano/pkg/version"

	// Volcano's default actions and plugins (deviceshare among them).
	_ "volcano.sh/volcano/pkg/scheduler/actions"
	_ "volcano.sh/volcano/pkg/scheduler/plugins"
	_ "volcano.sh/volcano/pkg/scheduler/util/assert"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/vgpu"
)

func main() {
	klog.InitFlags(nil)
	shared := vgpu.NewShared(time.Now)
	// Volcano registers its own series on the default registerer and serves
	// it at /metrics (--enable-metrics): ours go beside them.
	shared.ExportMetrics(prometheus.DefaultRegisterer)
	framework.RegisterPluginBuilder(vgpu.PluginName, vgpu.NewBuilder(shared))

	fs := pflag.CommandLine
	logFlushFreq := fs.Duration("log-flush-frequency", 5*time.Second, "Maximum number of seconds between log flushes")
	s := options.NewServerOption()
	s.AddFlags(fs)
	utilfeature.DefaultMutableFeatureGate.AddFlag(fs)
	commonutil.LeaderElectionDefault(&s.LeaderElection)
	s.LeaderElection.ResourceName = commonutil.GenerateComponentName(s.SchedulerNames)
	componentbaseoptions.BindLeaderElectionFlags(&s.LeaderElection, fs)
	s.RegisterOptions()
	cliflag.InitFlags()

	if s.PrintVersion {
		version.PrintVersionAndExit()
		return
	}
	if err := s.CheckOptionOrDie(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if s.CaCertFile != "" && s.CertFile != "" && s.KeyFile != "" {
		if err := s.ParseCAFiles(nil); err != nil {
			fmt.Fprintf(os.Stderr, "parse CA files: %v\n", err)
			os.Exit(1)
		}
	}
	if err := checkConf(s.SchedulerConf); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	klog.StartFlushDaemon(*logFlushFreq)
	defer klog.Flush()
	if err := app.Run(s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// checkConf fails start-up on invalid vgpu arguments and logs the warnings.
// With no --scheduler-conf Volcano uses its default configuration, which does
// not enable vgpu.
func checkConf(path string) error {
	if path == "" {
		klog.InfoS("No --scheduler-conf: Volcano's default configuration does not enable the vgpu plugin")
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("scheduler configuration: %w", err)
	}
	_, tiers, _, _, err := scheduler.UnmarshalSchedulerConf(string(data))
	if err != nil {
		return fmt.Errorf("scheduler configuration %s: %w", path, err)
	}
	warnings, err := vgpu.CheckTiers(tiers)
	if err != nil {
		return fmt.Errorf("scheduler configuration %s: %w", path, err)
	}
	for _, w := range warnings {
		klog.InfoS("WARNING: "+w, "config", path)
	}
	return nil
}
