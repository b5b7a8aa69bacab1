package dpserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
)

// settleTime collects the file events of one kubelet restart.
const settleTime = 200 * time.Millisecond

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

// Run serves and keeps the plugin registered until ctx ends. A value on
// restart (SIGHUP) starts over with a fresh socket and registration.
func (s *Server) Run(ctx context.Context, restart <-chan struct{}) error {
	logger := klog.FromContext(ctx).WithValues("resource", s.ResourceName)
	ctx = klog.NewContext(ctx, logger)
	if err := os.MkdirAll(s.PluginsDir, 0o755); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(s.PluginsDir); err != nil {
		return err
	}
	defer s.shutdown()
	defer os.Remove(s.Socket())
	defer s.setRegistered(false)

	retry := s.RegisterRetry
	if retry <= 0 {
		retry = 2 * time.Second
	}
	registered := false
	var retryC, settle <-chan time.Time
	pending := ""
	startOver := func(why string) error {
		logger.V(2).Info("Starting the device plugin server and registering with kubelet", "reason", why)
		if err := s.start(ctx); err != nil {
			return err
		}
		registered = false
		s.setRegistered(false)
		retryC = time.After(0)
		return nil
	}
	if err := startOver("startup"); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-restart:
			if err := startOver("restart requested (SIGHUP)"); err != nil {
				return err
			}
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("fsnotify watcher closed")
			}
			// Kubelet's restart deletes our socket, then creates kubelet.sock:
			// collect the events for a moment and start over once.
			switch {
			case filepath.Clean(ev.Name) == filepath.Clean(s.KubeletSocket) && ev.Has(fsnotify.Create):
				pending, settle = "kubelet.sock was recreated (kubelet restarted)", time.After(settleTime)
			case filepath.Clean(ev.Name) == filepath.Clean(s.Socket()) && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) && !exists(s.Socket()):
				// (a Remove of a socket that exists again is our own restart)
				if pending == "" {
					pending = "our socket was removed"
				}
				settle = time.After(settleTime)
			}
		case <-settle:
			settle = nil
			if exists(s.Socket()) {
				// Our server still listens (it was restarted for an earlier
				// event of the same kubelet restart): registering again is
				// enough, and restarting it would pull the socket from under
				// a kubelet that is dialling it after our registration.
				logger.V(2).Info("Registering again with kubelet", "reason", pending)
				registered, retryC = false, time.After(0)
				s.setRegistered(false)
			} else if err := startOver(pending); err != nil {
				return err
			}
			pending = ""
		case err, ok := <-w.Errors:
			if ok {
				logger.Error(err, "Watching the device-plugins directory", "dir", s.PluginsDir)
			}
		case <-retryC:
			retryC = nil
			if registered {
				continue
			}
			if !exists(s.Socket()) {
				// Kubelet removed our socket (it is restarting) while a retry
				// was due: registering now would send kubelet to a socket
				// that is gone. Start over once the restart settles, or now
				// if no event announced it.
				if settle == nil {
					if err := startOver("our socket is gone"); err != nil {
						return err
					}
				}
				continue
			}
			if err := s.register(ctx); err != nil {
				logger.Error(err, "Registration with kubelet failed; retrying", "retryIn", retry)
				retryC = time.After(retry)
				continue
			}
			registered = true
			s.setRegistered(true)
			logger.Info("Registered with kubelet", "kubeletSocket", s.KubeletSocket, "endpoint", s.SocketName)
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
