package containeremu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// ErrHostHasConfig: the fallback cannot run where the host itself has a
// limiter config, since libvcuda reads that before VCUDA_CONFIG.
var ErrHostHasConfig = errors.New("the host has " + api.LimiterConfigPath + ", which libvcuda would read instead of the container's config")

// startFallback starts cmd with the container's paths as a symlink tree under
// dir/root and libvcuda loaded by LD_PRELOAD (see the package doc).
func startFallback(cmd *exec.Cmd, dir string, s spec) error {
	if _, err := os.Stat(api.LimiterConfigPath); err == nil {
		return ErrHostHasConfig
	}
	root := filepath.Join(dir, "root")
	for _, m := range s.Mounts {
		link := filepath.Join(root, m.Target)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(m.Source, link); err != nil {
			return fmt.Errorf("symlink tree: %w", err)
		}
	}
	env, err := fallbackEnv(s, dir, root)
	if err != nil {
		return err
	}
	cmd.Env = env
	if p, ok := s.hostPathOf(cmd.Path); ok {
		cmd.Path = p
	}
	return cmd.Start()
}

// fallbackEnv rewrites the spec's environment for processes that see the
// host's filesystem: container paths are prefixed with root, the config is a
// copy whose shared_dir is prefixed too, and /etc/ld.so.preload becomes
// LD_PRELOAD.
func fallbackEnv(s spec, dir, root string) ([]string, error) {
	prefixed := map[string]bool{api.EnvSharedDir: true, "FAKEGPU_DIR": true}
	var env []string
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case prefixed[k] && strings.HasPrefix(v, "/"):
			v = filepath.Join(root, v)
		case k == "LD_LIBRARY_PATH":
			parts := strings.Split(v, ":")
			for i, p := range parts {
				parts[i] = filepath.Join(root, p)
			}
			v = strings.Join(parts, ":")
		case k == api.EnvConfig:
			continue // set below, only when there is a config
		}
		env = append(env, k+"="+v)
	}
	if host, ok := s.hostPathOf(api.LimiterConfigPath); ok {
		cfg, err := rewriteConfig(host, root, filepath.Join(dir, "vcuda.config"))
		if err != nil {
			return nil, err
		}
		env = append(env, api.EnvConfig+"="+cfg)
	}
	if host, ok := s.hostPathOf(api.LdPreloadPath); ok {
		libs, err := preloadList(host)
		if err != nil {
			return nil, err
		}
		for i, l := range libs {
			libs[i] = filepath.Join(root, l)
		}
		if len(libs) > 0 {
			env = append(env, "LD_PRELOAD="+strings.Join(libs, ":"))
		}
	}
	return env, nil
}

// rewriteConfig writes a copy of the limiter config at host to out, its
// shared_dir moved under root, and returns out.
func rewriteConfig(host, root, out string) (string, error) {
	b, err := os.ReadFile(host)
	if err != nil {
		return "", err
	}
	c, err := api.DecodeLimiterConfig(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", host, err)
	}
	c.SharedDir = filepath.Join(root, c.SharedDir)
	if b, err = c.Encode(); err != nil {
		return "", fmt.Errorf("fallback copy of %s: %w", host, err)
	}
	return out, os.WriteFile(out, b, 0o444)
}

// preloadList reads an ld.so.preload file: names separated by white space,
// '#' comments.
func preloadList(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		out = append(out, strings.Fields(line)...)
	}
	return out, sc.Err()
}
