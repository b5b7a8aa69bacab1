// Package procstat reads a process's CPU time and memory from /proc.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of CPU times in /proc/<pid>/stat: 100 on
// every Linux architecture Go supports.
const ClockTicks = 100

// Sample is one reading of a process.
type Sample struct {
	CPUSeconds float64 // user + system since the process started
	RSSKiB     int64   // resident now (VmRSS)
	PeakRSSKiB int64   // high-water mark of the resident set (VmHWM)
}

// Read samples pid.
func Read(pid int) (Sample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Sample{}, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Sample{}, err
	}
	return Parse(string(stat), string(status))
}

// Parse reads utime and stime (fields 14 and 15 of stat, after the command
// name in parentheses, which may itself hold spaces and parentheses) and
// VmRSS and VmHWM of status.
func Parse(stat, status string) (Sample, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return Sample{}, fmt.Errorf("/proc stat %q: no command name", stat)
	}
	f := strings.Fields(stat[end+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return Sample{}, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return Sample{}, fmt.Errorf("/proc stat: utime %q, stime %q: expected clock ticks", f[11], f[12])
	}
	s := Sample{CPUSeconds: float64(utime+stime) / ClockTicks}
	for _, line := range strings.Split(status, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(val), "kB")), 10, 64)
		if err != nil {
			return Sample{}, fmt.Errorf("/proc status %s %q: expected kB", key, val)
		}
		if key == "VmRSS" {
			s.RSSKiB = kib
		} else {
			s.PeakRSSKiB = kib
		}
	}
	return s, nil
}
