package dpserver

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// shortDir returns a directory whose socket paths stay under 107 bytes.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// fakeKubelet serves the Registration API on kubelet.sock.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	srv  *grpc.Server
	regs chan *pluginapi.RegisterRequest
}

func startKubelet(t *testing.T, sock string, regs chan *pluginapi.RegisterRequest) *fakeKubelet {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{srv: grpc.NewServer(), regs: regs}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(lis) }()
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.regs <- r
	return &pluginapi.Empty{}, nil
}

// restart does what kubelet does when it starts: remove every socket in
// the directory, then create kubelet.sock again.
func (k *fakeKubelet) restart(t *testing.T, dir string) *fakeKubelet {
	k.srv.Stop()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		os.Remove(filepath.Join(dir, e.Name()))
	}
	return startKubelet(t, filepath.Join(dir, "kubelet.sock"), k.regs)
}

type fakeService struct{ devs []*pluginapi.Device }

func (f fakeService) Devices() ([]*pluginapi.Device, <-chan struct{}) {
	return f.devs, make(chan struct{})
}
func (fakeService) Preferred(context.Context, *pluginapi.ContainerPreferredAllocationRequest) ([]string, error) {
	return nil, nil
}
func (fakeService) Allocate(context.Context, []string) (*pluginapi.ContainerAllocateResponse, error) {
	return &pluginapi.ContainerAllocateResponse{}, nil
}
func (fakeService) PreStart(context.Context, []string) error { return nil }

func waitRegistration(t *testing.T, regs chan *pluginapi.RegisterRequest, why string) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-regs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("no registration after %s", why)
		return nil
	}
}

// listDevices connects to the plugin socket as kubelet does.
func listDevices(t *testing.T, sock string) int {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Devices)
}

func TestRegistersAndReRegisters(t *testing.T) {
	dir := shortDir(t)
	kubeletSock := filepath.Join(dir, "kubelet.sock")
	regs := make(chan *pluginapi.RegisterRequest, 8)
	k := startKubelet(t, kubeletSock, regs)
	stale := filepath.Join(dir, "vgpu.sock")
	if err := os.WriteFile(stale, nil, 0o600); err != nil { // left over by a crashed run
		t.Fatal(err)
	}
	s := &Server{
		Service: fakeService{devs: []*pluginapi.Device{{ID: "GPU-a::0", Health: pluginapi.Healthy}}}, ResourceName: "volcano.sh/vgpu-number",
		PluginsDir: dir, SocketName: "vgpu.sock", KubeletSocket: kubeletSock, RegisterRetry: 50 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	restart := make(chan struct{})
	done := make(chan error)
	go func() { done <- s.Run(ctx, restart) }()

	r := waitRegistration(t, regs, "start")
	if r.Endpoint != "vgpu.sock" || r.ResourceName != "volcano.sh/vgpu-number" || !r.Options.PreStartRequired || !r.Options.GetPreferredAllocationAvailable || r.Version != pluginapi.Version {
		t.Errorf("registration = %+v", r)
	}
	if n := listDevices(t, s.Socket()); n != 1 {
		t.Errorf("ListAndWatch sent %d devices, want 1", n)
	}

	k = k.restart(t, dir)
	waitRegistration(t, regs, "kubelet.sock was recreated")
	if n := listDevices(t, s.Socket()); n != 1 {
		t.Errorf("after kubelet restart: ListAndWatch sent %d devices, want 1", n)
	}

	restart <- struct{}{}
	waitRegistration(t, regs, "SIGHUP")
	select {
	case r := <-regs:
		t.Errorf("unexpected extra registration %+v (restart loop?)", r)
	case <-time.After(300 * time.Millisecond):
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Socket()); !os.IsNotExist(err) {
		t.Errorf("socket left behind after shutdown: %v", err)
	}
	k.srv.Stop()
}

func TestRegistrationRetriesUntilKubeletIsUp(t *testing.T) {
	dir := shortDir(t)
	kubeletSock := filepath.Join(dir, "kubelet.sock")
	regs := make(chan *pluginapi.RegisterRequest, 8)
	s := &Server{Service: fakeService{}, ResourceName: "example.com/x", PluginsDir: dir, SocketName: "x.sock", KubeletSocket: kubeletSock, RegisterRetry: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Run(ctx, nil) }()
	time.Sleep(150 * time.Millisecond) // a few failed attempts
	k := startKubelet(t, kubeletSock, regs)
	defer k.srv.Stop()
	waitRegistration(t, regs, "kubelet came up")
}
