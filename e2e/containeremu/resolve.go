package containeremu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

const maxSymlinks = 40 // as the kernel's path walk

// resolveIn returns where the container path p is under root, resolved as a
// process chrooted at root would resolve it: a symlink in an existing
// component is followed inside root (an absolute target starts again at
// root, ".." stops at root), so /var/run -> /run gives root/run and never the
// host's /run. Components that do not exist are kept as they are.
func resolveIn(root, p string) (string, error) {
	rest := strings.Split(p, "/")
	cur := "" // resolved so far, relative to root: "" or "/a/b"
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if cur = path.Dir(cur); cur == "/" || cur == "." {
				cur = ""
			}
			continue
		}
		next := cur + "/" + c
		fi, err := os.Lstat(root + next)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Mode()&fs.ModeSymlink == 0) {
			cur = next
			continue
		}
		if err != nil {
			return "", err
		}
		if links++; links > maxSymlinks {
			return "", fmt.Errorf("resolving %s in %s: too many levels of symbolic links", p, root)
		}
		target, err := os.Readlink(root + next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			cur = ""
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return root + cur, nil
}
