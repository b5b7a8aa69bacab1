// Package dpserver is the kubelet side of the device plugin: it serves the
// v1beta1 DevicePlugin API on a unix socket in kubelet's device-plugins
// directory, registers with kubelet.sock, and starts over (new socket, new
// registration) when kubelet restarts (kubelet.sock is recreated and our
// socket deleted), when our socket disappears, or on request (SIGHUP).
package dpserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Service is what the plugin does; the server only does the plumbing.
type Service interface {
	// Devices returns the current devices and a channel closed when they change.
	Devices() ([]*pluginapi.Device, <-chan struct{})
	Preferred(ctx context.Context, req *pluginapi.ContainerPreferredAllocationRequest) ([]string, error)
	Allocate(ctx context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error)
	PreStart(ctx context.Context, ids []string) error
}

// Server serves one resource.
type Server struct {
	pluginapi.UnimplementedDevicePluginServer

	Service       Service
	ResourceName  string
	PluginsDir    string
	SocketName    string
	KubeletSocket string
	// RegisterRetry is the pause between registration attempts (default 2s).
	RegisterRetry time.Duration

	mu         sync.Mutex
	registered bool // kubelet accepted the current registration
	grpc       *grpc.Server
	stop       chan struct{} // closed when the current gRPC server stops
}

var _ pluginapi.DevicePluginServer = (*Server)(nil)

// ErrNotRegistered is wrapped by Registered when kubelet does not know the
// plugin (yet, or again after a kubelet restart).
var ErrNotRegistered = errors.New("not registered with kubelet")

// Registered reports whether kubelet accepted the plugin and its socket is
// there to serve kubelet.
func (s *Server) Registered() error {
	s.mu.Lock()
	ok := s.registered
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s (is kubelet running? the plugin registers again when kubelet.sock is recreated)", ErrNotRegistered, s.KubeletSocket)
	}
	if !exists(s.Socket()) {
		return fmt.Errorf("%w: the plugin socket %s is gone", ErrNotRegistered, s.Socket())
	}
	return nil
}

func (s *Server) setRegistered(v bool) {
	s.mu.Lock()
	s.registered = v
	s.mu.Unlock()
}

// Socket returns the plugin socket path.
func (s *Server) Socket() string { return filepath.Join(s.PluginsDir, s.SocketName) }

func (s *Server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return Options(), nil
}

// Options are the options registered with kubelet.
func Options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}
}

func (s *Server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	s.mu.Lock()
	stop := s.stop
	s.mu.Unlock()
	for {
		devs, changed := s.Service.Devices()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		case <-stop:
			return nil
		}
	}
}

func (s *Server) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		ids, err := s.Service.Preferred(ctx, cr)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (s *Server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		r, err := s.Service.Allocate(ctx, cr.GetDevicesIds())
		if err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

func (s *Server) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	if err := s.Service.PreStart(ctx, req.GetDevicesIds()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

// start removes a stale socket, listens and serves.
func (s *Server) start(ctx context.Context) error {
	s.shutdown()
	sock := s.Socket()
	if err := os.MkdirAll(s.PluginsDir, 0o755); err != nil {
		return fmt.Errorf("device-plugins directory: %w", err)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale socket %s: %w", sock, err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", sock, err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s)
	s.mu.Lock()
	s.grpc, s.stop = g, make(chan struct{})
	s.mu.Unlock()
	go func() {
		if err := g.Serve(lis); err != nil {
			klog.FromContext(ctx).Error(err, "Device plugin gRPC server stopped", "socket", sock)
		}
	}()
	klog.FromContext(ctx).V(2).Info("Serving the device plugin API", "socket", sock, "resource", s.ResourceName)
	return nil
}

func (s *Server) shutdown() {
	s.mu.Lock()
	g, stop := s.grpc, s.stop
	s.grpc, s.stop = nil, nil
	s.mu.Unlock()
	if g == nil {
		return
	}
	close(stop)
	g.Stop()
}

// register tells kubelet about the plugin.
func (s *Server) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+s.KubeletSocket, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     s.SocketName,
		ResourceName: s.ResourceName,
		Options:      Options(),
	})
	if err != nil {
		return fmt.Errorf("registering %s with kubelet at %s: %w", s.ResourceName, s.KubeletSocket, err)
	}
	return nil
}
