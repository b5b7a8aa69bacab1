package preloadhook

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ReportFile is the hook's report, beside the container's preload file.
const ReportFile = "image.json"

// ReportVersion is the version of ReportFile.
const ReportVersion = "v1"

// Linking of the container's entrypoint.
const (
	LinkDynamic = "dynamic" // glibc's loader: ld.so.preload applies
	LinkMusl    = "musl"    // musl's loader: ignores ld.so.preload
	LinkStatic  = "static"  // no loader at all
	LinkScript  = "script"  // #!: its interpreter is what runs
	LinkUnknown = "unknown" // not found, unreadable, or the kernel cannot resolve inside the root (openat2)
)

// Reasons libvcuda.so cannot load (Report.Unlimited).
const (
	UnlimitedMusl   = "musl"   // the image has musl's loader and no glibc
	UnlimitedStatic = "static" // the entrypoint is statically linked
)

// Report is what the hook found in the image, for the device plugin to
// report (metric, pod event): processes libvcuda.so cannot load into run
// with no GPU limits.
type Report struct {
	Version string `json:"version"`
	// Libc: glibc, musl (musl's loader and no glibc) or unknown.
	Libc string `json:"libc"`
	// Entrypoint is process.args[0] as found in the image, Linking its linking.
	Entrypoint string `json:"entrypoint,omitempty"`
	Linking    string `json:"linking"`
	// Unlimited names why libvcuda.so cannot load; empty: it can.
	Unlimited string `json:"unlimited,omitempty"`
	// KeptEntries counts the image's own preload entries kept.
	KeptEntries int `json:"keptEntries"`
}

// Message says what a report means for the pod's owner; "" when nothing is wrong.
func (r Report) Message(container string) string {
	switch r.Unlimited {
	case UnlimitedMusl:
		return fmt.Sprintf("container %s: the image uses musl libc, whose loader ignores /etc/ld.so.preload and cannot load libvcuda.so (built for glibc): its GPU memory and compute are not limited; use a glibc-based image", container)
	case UnlimitedStatic:
		return fmt.Sprintf("container %s: its entrypoint %s is statically linked, so no library is preloaded into it: its GPU memory and compute are not limited; link it dynamically against glibc", container, r.Entrypoint)
	}
	return ""
}

// process is the part of config.json that names the entrypoint.
type process struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
}

var glibcLoaders = []string{"lib64/ld-linux-x86-64.so.2", "lib/ld-linux-aarch64.so.1", "lib/ld-linux-x86-64.so.2"}
var muslLoaders = []string{"lib/ld-musl-x86_64.so.1", "lib/ld-musl-aarch64.so.1"}

// Inspect looks at the image's C library and the entrypoint's linking. Paths
// are resolved inside root (openat2 RESOLVE_IN_ROOT: the image's links
// cannot reach host files); where the kernel lacks openat2 it says unknown.
func Inspect(root string, p process) Report {
	r := Report{Version: ReportVersion, Libc: "unknown", Linking: LinkUnknown}
	rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return r
	}
	defer unix.Close(rfd)
	exists := func(paths []string) (bool, error) {
		for _, p := range paths {
			fd, err := openInRoot(rfd, p, unix.O_PATH)
			if err == nil {
				unix.Close(fd)
				return true, nil
			}
			if errors.Is(err, unix.ENOSYS) {
				return false, err
			}
		}
		return false, nil
	}
	glibc, err1 := exists(glibcLoaders)
	musl, err2 := exists(muslLoaders)
	switch {
	case err1 != nil || err2 != nil:
	case glibc:
		r.Libc = "glibc"
	case musl:
		r.Libc = "musl"
		r.Unlimited = UnlimitedMusl
	}
	if len(p.Args) > 0 {
		r.Entrypoint, r.Linking = entrypoint(rfd, p, 2)
		if r.Linking == LinkStatic && r.Unlimited == "" {
			r.Unlimited = UnlimitedStatic
		}
		if r.Linking == LinkMusl && r.Unlimited == "" {
			r.Unlimited = UnlimitedMusl
		}
	}
	return r
}

// entrypoint finds args[0] in the image (PATH from the process's env) and
// reads its linking, following a #! interpreter up to depth times.
func entrypoint(rfd int, p process, depth int) (string, string) {
	name := p.Args[0]
	var candidates []string
	switch {
	case strings.HasPrefix(name, "/"):
		candidates = []string{name}
	case strings.Contains(name, "/"):
		candidates = []string{path.Join("/", p.Cwd, name)}
	default:
		pathEnv := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		for _, kv := range p.Env {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				pathEnv = v
			}
		}
		for _, dir := range filepath.SplitList(pathEnv) {
			if strings.HasPrefix(dir, "/") {
				candidates = append(candidates, path.Join(dir, name))
			}
		}
	}
	for _, c := range candidates {
		// Only a regular file is opened for reading: opening a device node
		// as root may have effects of its own.
		pfd, err := openInRoot(rfd, c, unix.O_PATH)
		if errors.Is(err, unix.ENOSYS) {
			return name, LinkUnknown
		}
		if err != nil {
			continue
		}
		var st unix.Stat_t
		err = unix.Fstat(pfd, &st)
		unix.Close(pfd)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		fd, err := openInRoot(rfd, c, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
		if err != nil {
			continue
		}
		f := os.NewFile(uintptr(fd), c)
		linking, interp := linkingOf(f)
		f.Close()
		if linking == LinkScript && interp != "" && depth > 0 {
			q := p
			q.Args = []string{interp}
			if _, l := entrypoint(rfd, q, depth-1); l != LinkUnknown {
				return c, l
			}
		}
		return c, linking
	}
	return name, LinkUnknown
}

// linkingOf reads an executable's header: ELF with or without an
// interpreter, or a #! script (and its interpreter).
func linkingOf(f *os.File) (string, string) {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return LinkUnknown, ""
	}
	head := make([]byte, 256)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if interp, ok := strings.CutPrefix(string(head), "#!"); ok {
		line, _, _ := strings.Cut(interp, "\n")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			return LinkScript, ""
		}
		return LinkScript, fields[0]
	}
	e, err := elf.NewFile(f)
	if err != nil {
		return LinkUnknown, ""
	}
	defer e.Close()
	for _, prog := range e.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(prog.Open(), 4096))
		if err != nil {
			return LinkUnknown, ""
		}
		if strings.Contains(string(b), "ld-musl") {
			return LinkMusl, ""
		}
		return LinkDynamic, ""
	}
	return LinkStatic, ""
}

// openInRoot opens p inside the root directory rfd, resolving links as if
// rfd were / (openat2 RESOLVE_IN_ROOT), never through /proc magic links.
func openInRoot(rfd int, p string, flags int) (int, error) {
	return unix.Openat2(rfd, strings.TrimPrefix(p, "/"), &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// WriteReport writes the report beside the preload file (the plugin's
// container directory), replacing an earlier one.
func WriteReport(preloadFile string, r Report) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	dir := filepath.Dir(preloadFile)
	tmp := filepath.Join(dir, "."+ReportFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("image report: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, ReportFile))
}

// ReadReport reads a container directory's report; absent is fs.ErrNotExist.
func ReadReport(dir string) (Report, error) {
	var r Report
	f, err := os.OpenFile(filepath.Join(dir, ReportFile), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return r, err
	}
	defer f.Close()
	if err := json.NewDecoder(io.LimitReader(f, 64<<10)).Decode(&r); err != nil {
		return r, fmt.Errorf("%s: %w", f.Name(), err)
	}
	if r.Version != ReportVersion {
		return r, fmt.Errorf("%s: version %q, expected %q", f.Name(), r.Version, ReportVersion)
	}
	return r, nil
}
