package nvmlsim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// InjectFile lets a process outside the device plugin (the e2e harness, and
// only it: the file lives in the simulated node's state directory) inject
// GPU faults: it follows a text file and applies each new line:
//
//	<gpu> <xid>   raise Xid <xid> on the GPU
//	<gpu> lost    the GPU falls off the bus (Xid 79, then every NVML call for it fails)
//	<gpu> reset   the GPU answers again (a GPU reset)
//	<gpu> fail-mig-create   the GPU's next MIG instance create fails (FailMIGCreate)
//
// where <gpu> is a UUID, an index or "all" (all: Xids only). Lines written
// before the plugin started are ignored; a truncated file is read from its
// start again.
type InjectFile struct {
	Sim      *Sim
	Path     string
	Interval time.Duration // default 500ms
}

// Run follows the file until ctx ends.
func (f InjectFile) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("file", f.Path)
	interval := f.Interval
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	offset := int64(0)
	if st, err := os.Stat(f.Path); err == nil {
		offset = st.Size()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next, err := f.readFrom(offset, func(line string) {
			if err := f.apply(line); err != nil {
				logger.Error(err, "Ignoring Xid injection line", "line", line)
				return
			}
			logger.V(2).Info("Injected simulated Xid", "line", line)
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			logger.Error(err, "Reading Xid injection file")
		}
		offset = next
	}
}

func (f InjectFile) readFrom(offset int64, fn func(string)) (int64, error) {
	file, err := os.Open(f.Path)
	if err != nil {
		return 0, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return offset, err
	}
	if st.Size() < offset {
		offset = 0
	}
	if _, err := file.Seek(offset, io.SeekStart); err != nil {
		return offset, err
	}
	r := bufio.NewReader(file)
	for {
		line, err := r.ReadString('\n')
		if err != nil { // incomplete last line: read it next time
			return offset, nil
		}
		offset += int64(len(line))
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			fn(line)
		}
	}
}

func (f InjectFile) apply(line string) error {
	fields := strings.Fields(line)
	if len(fields) != 2 {
		return fmt.Errorf("expected \"<gpu uuid|index|all> <xid|lost|reset|fail-mig-create>\", got %q", line)
	}
	uuid, err := f.Sim.GPUUUID(fields[0])
	if err != nil {
		return err
	}
	switch fields[1] {
	case "fail-mig-create":
		if uuid == "" {
			return fmt.Errorf("%q: name one GPU (a UUID or an index) in MIG mode", line)
		}
		return f.Sim.FailMIGCreate(uuid)
	case "lost", "reset":
		if uuid == "" {
			return fmt.Errorf("%q: name one GPU (a UUID or an index) to make it %s", line, fields[1])
		}
		if fields[1] == "lost" {
			return f.Sim.FallOffBus(uuid)
		}
		return f.Sim.Reset(uuid)
	}
	xid, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return fmt.Errorf("xid %q: expected a decimal number, lost or reset", fields[1])
	}
	return f.Sim.InjectXID(uuid, xid)
}
