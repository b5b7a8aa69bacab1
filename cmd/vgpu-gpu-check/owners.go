package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Per-process attribution: the check starts every tenant, so it knows each
// tenant's unshare process; every host process below it belongs to that
// tenant. ownersOf gives the host pid -> tenant key map the node's compute
// controller can take to attribute NVML's per-process samples (host pids) to
// tenants, the way the device plugin maps a host pid to a container through
// its cgroup.

// descendants maps every pid below one of roots (host pid -> tenant key),
// roots included, given each process's parent.
func descendants(parent map[int]int, roots map[int]string) map[int]string {
	out := make(map[int]string, len(roots))
	for pid := range parent {
		for p, hops := pid, 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if key, ok := roots[p]; ok {
				out[pid] = key
				break
			}
		}
	}
	for pid, key := range roots {
		out[pid] = key
	}
	return out
}

// parents reads every process's parent pid from procRoot (/proc).
func parents(procRoot string) (map[int]int, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", procRoot, err)
	}
	out := make(map[int]int, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // gone since the listing
		}
		if pp, ok := parseStatPPID(b); ok {
			out[pid] = pp
		}
	}
	return out, nil
}

// parseStatPPID reads the ppid of /proc/PID/stat ("pid (comm) state ppid
// ..."); comm may hold spaces and parentheses, so it reads after the last ')'.
func parseStatPPID(stat []byte) (int, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(stat[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(string(f[1]))
	return pp, err == nil
}

// ownersOf maps the host pids of the tenants' processes to tenant keys
// (roots: each tenant's unshare pid).
func ownersOf(procRoot string, roots map[int]string) (map[int]string, error) {
	pp, err := parents(procRoot)
	if err != nil {
		return nil, err
	}
	return descendants(pp, roots), nil
}
