// Package incluster gives an out-of-cluster process what
// rest.InClusterConfig reads: KUBERNETES_SERVICE_HOST/PORT and a token and
// CA under ServiceAccountDir. Volcano's deviceshare reaches the apiserver
// only that way.
//
// The files are laid over ServiceAccountDir inside a private mount
// namespace of the one process that needs them (Exec, run as a wrapper that
// then execs the real binary), so nothing is written to that path on the
// machine. Where mount namespaces are not permitted, Install writes them
// there for the benchmark run and its undo removes them again.
package incluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// ServiceAccountDir is where rest.InClusterConfig looks for token and ca.crt.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Files names are rest.InClusterConfig's.
var files = []string{"token", "ca.crt"}

// Env is the environment that points rest.InClusterConfig at host:port.
func Env(host string, port int) []string {
	return []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + strconv.Itoa(port)}
}

// Write copies the token and CA files into dir (created) as token and
// ca.crt, the layout of ServiceAccountDir.
func Write(dir, tokenFile, caFile string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for i, src := range []string{tokenFile, caFile} {
		if err := copyFile(src, filepath.Join(dir, files[i])); err != nil {
			return err
		}
	}
	return nil
}

// Exec enters a private mount namespace, lays the files of dir (see Write)
// over ServiceAccountDir there and execs argv in the same process. It
// returns only on failure.
func Exec(dir string, argv []string) error {
	if len(argv) == 0 {
		return errors.New("incluster: no command to run")
	}
	runtime.LockOSThread() // the namespace belongs to this thread, which execs
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return fmt.Errorf("private mount namespace: %w", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := layOver(dir); err != nil {
		return err
	}
	return syscall.Exec(argv[0], argv, os.Environ())
}

// layOver makes dir's files appear in ServiceAccountDir: a bind mount when
// the directory exists, else an overlay on its deepest existing ancestor
// (/run on most machines) whose upper layer, on a private tmpfs, adds the
// missing directories and the files.
func layOver(dir string) error {
	if fi, err := os.Stat(ServiceAccountDir); err == nil && fi.IsDir() {
		if err := syscall.Mount(dir, ServiceAccountDir, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount over %s: %w", ServiceAccountDir, err)
		}
		return nil
	}
	anc, rest := ServiceAccountDir, ""
	for {
		rest = filepath.Join(filepath.Base(anc), rest)
		anc = filepath.Dir(anc)
		if fi, err := os.Stat(anc); err == nil && fi.IsDir() {
			break
		}
	}
	real, err := filepath.EvalSymlinks(anc)
	if err != nil {
		return err
	}
	if real == "/" {
		return fmt.Errorf("no directory below / to lay %s over", ServiceAccountDir)
	}
	layers := dir + ".layers"
	if err := os.MkdirAll(layers, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", layers, "tmpfs", 0, "mode=0700"); err != nil {
		return fmt.Errorf("tmpfs for the overlay: %w", err)
	}
	upper, work := filepath.Join(layers, "upper"), filepath.Join(layers, "work")
	if err := Write(filepath.Join(upper, rest), filepath.Join(dir, files[0]), filepath.Join(dir, files[1])); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", real, upper, work)
	if err := syscall.Mount("overlay", real, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay on %s: %w", real, err)
	}
	return nil
}

// Check reports whether ServiceAccountDir holds a readable, non-empty token
// (run through Exec to prove the namespace works).
func Check() error {
	data, err := os.ReadFile(filepath.Join(ServiceAccountDir, files[0]))
	if err == nil && len(data) == 0 {
		err = errors.New("empty token")
	}
	return err
}

// Install writes dir's files into ServiceAccountDir on the machine, for
// when Exec is not permitted. It refuses to replace existing credentials.
// undo removes the files and the directories Install created.
func Install(dir string) (undo func() error, err error) {
	var created []string
	for d := ServiceAccountDir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = append(created, d) // deepest first
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(ServiceAccountDir, f)); err == nil {
			return nil, fmt.Errorf("%s already holds %s: not replacing credentials that are not ours", ServiceAccountDir, f)
		}
	}
	undo = func() error {
		var errs []error
		for _, f := range files {
			if err := os.Remove(filepath.Join(ServiceAccountDir, f)); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
		for _, d := range created {
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	if err := Write(ServiceAccountDir, filepath.Join(dir, files[0]), filepath.Join(dir, files[1])); err != nil {
		return nil, errors.Join(err, undo())
	}
	return undo, nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o600)
}
