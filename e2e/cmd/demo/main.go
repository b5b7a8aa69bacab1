// Command demo submits config/examples/vgpu-job.yaml to the local cluster,
// waits until its pods run, and prints where their GPUs went: pod → node →
// GPU UUIDs → memory/cores, read from the scheduler's assignment annotation.
// It ends by running vcuda's workload in every container of the Job at the
// same time, through the container emulator (e2e/containeremu: the device
// plugin's Allocate response, libvcuda preloaded, the node's simulated GPUs),
// and prints what each saw: what a user would check with nvidia-smi inside
// the pod; then a tenant that lifts its own memory cap, and the node's
// memory guard ending it (tamper.go).
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	vcclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/containeremu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	wd, _ := os.Getwd()
	root, err := cluster.FindRoot(wd)
	if err != nil {
		return err
	}
	cfg, err := cluster.DefaultConfig(root)
	if err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig())
	if err != nil {
		return fmt.Errorf("no local cluster (%v): run `make cluster` first", err)
	}
	kube := kubernetes.NewForConfigOrDie(rc)
	vc := vcclient.NewForConfigOrDie(rc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	path := filepath.Join(root, "config", "examples", "vgpu-job.yaml")
	job, err := readJob(path)
	if err != nil {
		return err
	}
	jobs := vc.BatchV1alpha1().Jobs(job.Namespace)
	if err := jobs.Delete(ctx, job.Name, metav1.DeleteOptions{}); err == nil {
		fmt.Printf("Deleting the previous %s/%s …\n", job.Namespace, job.Name)
		for {
			_, err := jobs.Get(ctx, job.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := waitNoPods(ctx, kube, job); err != nil {
			return err
		}
	}
	fmt.Printf("Submitting Volcano Job %s/%s from %s\n", job.Namespace, job.Name, path)
	if _, err := jobs.Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return err
	}
	pods, err := waitRunning(ctx, kube, job)
	if err != nil {
		return err
	}
	fmt.Println()
	cmd := exec.CommandContext(ctx, cfg.BinDir+"/vcctl", "job", "list", "-n", job.Namespace, "--kubeconfig", cfg.Kubeconfig())
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	fmt.Println("$ vcctl job list -n", job.Namespace, "--kubeconfig", cfg.Kubeconfig())
	if err := cmd.Run(); err != nil {
		return err
	}
	fmt.Println()
	printPlacement(pods)
	fmt.Println()
	return runInPods(ctx, cfg, kube, pods)
}

// inPod is one container's workload run.
type inPod struct {
	pod, container, node string
	ctr                  containeremu.Container
	summary              containeremu.Summary
	err                  error
}

// runInPods runs the workload in every container of pods at once and
// prints what each saw.
func runInPods(ctx context.Context, cfg cluster.Config, kube kubernetes.Interface, pods []corev1.Pod) error {
	emu, err := containeremu.New(containeremu.DefaultConfig(cfg.Root, cfg.SocketDir))
	if err != nil {
		return err
	}
	sim, err := simconfig.Load(cfg.SimFile)
	if err != nil {
		return err
	}
	var runs []*inPod
	var wg, holding sync.WaitGroup
	for _, p := range pods {
		node, ok := sim.Find(p.Spec.NodeName)
		if !ok {
			return fmt.Errorf("pod %s runs on %s, which is not a simulated node of %s", p.Name, p.Spec.NodeName, cfg.SimFile)
		}
		rec, err := waitAdmitted(ctx, cfg, p)
		if err != nil {
			return err
		}
		for _, ctr := range p.Spec.Containers {
			c, err := containeremu.FromRecord(rec, ctr.Name, containeremu.NodeGPUs(node))
			if err != nil {
				return err
			}
			c.QOSClass = string(p.Status.QOSClass)
			r := &inPod{pod: p.Name, container: ctr.Name, node: p.Spec.NodeName, ctr: c}
			runs = append(runs, r)
			wg.Add(1)
			holding.Add(1)
			go func() {
				defer wg.Done()
				held := sync.OnceFunc(holding.Done)
				defer held()
				proc, err := emu.StartWorkload(ctx, c, containeremu.Workload{ChunkMiB: 1, HoldMiB: demoHoldMiB, Seconds: demoSeconds})
				if err != nil {
					r.err = err
					return
				}
				if err := proc.WaitStderr(ctx, containeremu.HoldingMessage); err == nil {
					held()
				}
				r.summary, r.err = proc.Summary()
			}()
		}
	}
	fmt.Printf("Running a CUDA workload in each container at once (%s mode container emulator, libvcuda.so on the fake driver) …\n\n", emu.Mode())
	// While they run: what each node's device plugin measures of them.
	holding.Wait()
	time.Sleep(demoSeconds * time.Second * 3 / 4)
	usage := scrapeUsage(ctx, cfg, sim, runs)
	wg.Wait()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tCONTAINER\tGPUS SEEN\tMEMORY TOTAL (MiB)\tALLOCATABLE UNTIL OOM (MiB)\tACHIEVED SHARE (%)")
	var errs []string
	for _, r := range runs {
		if r.err != nil {
			errs = append(errs, fmt.Sprintf("%s/%s: %v", r.pod, r.container, r.err))
			fmt.Fprintf(w, "%s\t%s\t(workload failed)\t-\t-\t-\n", r.pod, r.container)
			continue
		}
		s := r.summary
		share := "-"
		if s.UtilShare != nil {
			share = fmt.Sprintf("%.1f", 100**s.UtilShare)
		}
		oom := ""
		if s.AllocError == containeremu.CUDAErrorOutOfMemory {
			oom = " (then OUT_OF_MEMORY)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d%s\t%s\n", r.pod, r.container, strings.Join(s.Devices, ","), s.CUDATotalMiB, s.AllocatableMiB(), oom, share)
	}
	w.Flush()
	if len(errs) > 0 {
		return fmt.Errorf("workload in the containers: %s", strings.Join(errs, "; "))
	}
	fmt.Printf("\nWhat the device plugins' /metrics showed %.0f s after the workloads held their memory (each workload holds %d MiB):\n\n", demoSeconds*0.75, demoHoldMiB)
	fmt.Println(usage)
	ns := ""
	if len(pods) > 0 {
		ns = pods[0].Namespace
	}
	if len(runs) > 0 {
		if err := tamper(ctx, kube, emu, runs[0], ns, runs[0].summary.CUDATotalMiB); err != nil {
			return fmt.Errorf("%s/%s: %w", runs[0].pod, runs[0].container, err)
		}
		if err := unlimited(ctx, kube, emu, runs[0], ns); err != nil {
			return fmt.Errorf("%s/%s: %w", runs[0].pod, runs[0].container, err)
		}
	}
	for _, args := range [][]string{{"nodes"}, {"pods", "-n", ns}} {
		fmt.Printf("$ kubectl vgpu %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, "kubectl-vgpu"), append(args, "--kubeconfig", cfg.Kubeconfig())...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("kubectl vgpu %s: %w", strings.Join(args, " "), err)
		}
		fmt.Println()
	}
	return nil
}

// waitAdmitted waits for the kubelet emulator's record of the pod's
// admission: the device plugin's Allocate responses.
func waitAdmitted(ctx context.Context, cfg cluster.Config, p corev1.Pod) (kubeletemu.Record, error) {
	for {
		rec, err := kubeletemu.ReadRecord(cfg.SocketDir, p.Spec.NodeName, string(p.UID))
		if err == nil && rec.Admitted {
			return rec, nil
		}
		if err == nil {
			err = fmt.Errorf("not admitted: %s", rec.Error)
		}
		select {
		case <-ctx.Done():
			return rec, fmt.Errorf("pod %s: no device plugin allocation recorded by the kubelet emulator (%v); see %s", p.Name, err, cfg.RecordsDir(p.Spec.NodeName))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func readJob(path string) (*batchv1alpha1.Job, error) {
	objs, err := cluster.ReadObjects(path)
	if err != nil || len(objs) != 1 {
		return nil, fmt.Errorf("%s: expected one Volcano Job (%v)", path, err)
	}
	job := &batchv1alpha1.Job{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(objs[0].Object, job, true); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return job, nil
}

func jobPods(ctx context.Context, kube kubernetes.Interface, job *batchv1alpha1.Job) ([]corev1.Pod, error) {
	list, err := kube.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: batchv1alpha1.JobNameKey + "=" + job.Name,
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func waitNoPods(ctx context.Context, kube kubernetes.Interface, job *batchv1alpha1.Job) error {
	for {
		pods, err := jobPods(ctx, kube, job)
		if err != nil {
			return err
		}
		if len(pods) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("old pods of %s still exist", job.Name)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func waitRunning(ctx context.Context, kube kubernetes.Interface, job *batchv1alpha1.Job) ([]corev1.Pod, error) {
	want := 0
	for _, t := range job.Spec.Tasks {
		want += int(t.Replicas)
	}
	for {
		pods, err := jobPods(ctx, kube, job)
		if err != nil {
			return nil, err
		}
		running := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running == want && len(pods) == want {
			return pods, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("job %s: %d of %d pods running after the wait; see `kubectl describe pods -n %s`", job.Name, running, want, job.Namespace)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func printPlacement(pods []corev1.Pod) {
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tNODE\tCONTAINER\tGPU UUID\tMEMORY (MiB)\tCORES (%)")
	for _, p := range pods {
		value, ok := p.Annotations[api.AssignmentKey]
		if !ok {
			fmt.Fprintf(w, "%s\t%s\t-\t(no GPU assignment)\t-\t-\n", p.Name, p.Spec.NodeName)
			continue
		}
		a, err := api.DecodeAssignment(value)
		if err != nil {
			fmt.Fprintf(w, "%s\t%s\t-\t(%v)\t-\t-\n", p.Name, p.Spec.NodeName, err)
			continue
		}
		for _, c := range a.Containers {
			name := c.Name
			if c.Init {
				name += " (init)"
			}
			uuids, mem, cores := make([]string, 0, len(c.Devices)), make([]string, 0, len(c.Devices)), make([]string, 0, len(c.Devices))
			for _, d := range c.Devices {
				uuids = append(uuids, d.UUID)
				mem = append(mem, fmt.Sprint(d.MemoryMiB))
				cores = append(cores, fmt.Sprint(d.Cores))
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, a.Node, name, strings.Join(uuids, ","), strings.Join(mem, ","), strings.Join(cores, ","))
		}
	}
	w.Flush()
}
