// Package cdi is the device plugin's side of the Container Device Interface:
// the fully-qualified names of the GPUs a container gets (resolved by the
// runtime against the NVIDIA toolkit's CDI spec), the cdi.k8s.io/ container
// annotation for runtimes that read CDI only from annotations, and the
// plugin's own CDI specs: one device per allocated container whose
// createRuntime hook keeps the image's /etc/ld.so.preload (package
// preloadhook, binary vgpu-cdi-hook), and the MIG devices it hands a
// container (mig.go) with the driver's edits read from the toolkit's spec
// (toolkit.go).
//
// Naming rules (CDI specification): a kind is vendor/class; the vendor is
// letters, digits, '-', '_' and '.', starting with a letter and ending with a
// letter or digit; the class the same without '.'; a device name is
// letters, digits, '-', '_', '.' and ':', starting and ending with a letter
// or digit. A qualified name is kind=name.
package cdi

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Defaults of the device plugin's cdi section.
const (
	// DefaultKind is the NVIDIA Container Toolkit's kind for whole GPUs.
	DefaultKind = "nvidia.com/gpu"
	// LimiterKind is the kind of the plugin's own per-container devices.
	LimiterKind = "volcano-vgpu.io/limiter"
	// DefaultSpecDir is where runtimes look for dynamic CDI specs.
	DefaultSpecDir = "/var/run/cdi"
	// AnnotationPrefix starts every CDI container annotation key.
	AnnotationPrefix = "cdi.k8s.io/"
	// AnnotationPlugin names this plugin in its annotation keys.
	AnnotationPlugin = "volcano-vgpu"
	// maxAnnotationName is the limit on the key's name part (as for labels).
	maxAnnotationName = 63
)

// Strategy says how a GPU is named: by UUID or by index.
type Strategy string

// Strategies.
const (
	ByUUID  Strategy = "uuid"
	ByIndex Strategy = "index"
)

// GPU is what a strategy needs of one GPU. MIG devices are not named here:
// the plugin names them in its own spec (WriteMIG).
type GPU struct {
	UUID  string
	Index int
}

var namers = map[Strategy]func(GPU) string{
	ByUUID:  func(g GPU) string { return g.UUID },
	ByIndex: func(g GPU) string { return strconv.Itoa(g.Index) },
}

// Strategies lists the valid strategies, sorted.
func Strategies() []string {
	out := make([]string, 0, len(namers))
	for s := range namers {
		out = append(out, string(s))
	}
	slices.Sort(out)
	return out
}

// ErrInvalidName: a kind, device name or annotation key breaks CDI's rules.
var ErrInvalidName = errors.New("invalid CDI name")

// ParseStrategy checks a configured strategy against the table.
func ParseStrategy(key, v string) (Strategy, error) {
	if _, ok := namers[Strategy(v)]; !ok {
		return "", fmt.Errorf("%s: expected one of %s, got %q", key, strings.Join(Strategies(), ", "), v)
	}
	return Strategy(v), nil
}

// Names returns kind=<name> for each GPU, in the given order.
func Names(kind string, s Strategy, gpus []GPU) ([]string, error) {
	name, ok := namers[s]
	if !ok {
		return nil, fmt.Errorf("%w: unknown device-name strategy %q (expected %s)", ErrInvalidName, s, strings.Join(Strategies(), ", "))
	}
	out := make([]string, len(gpus))
	for i, g := range gpus {
		q, err := Qualified(kind, name(g))
		if err != nil {
			return nil, err
		}
		out[i] = q
	}
	return out, nil
}

// Qualified returns kind=name after checking both.
func Qualified(kind, name string) (string, error) {
	if err := ValidateKind(kind); err != nil {
		return "", err
	}
	if err := ValidateDeviceName(name); err != nil {
		return "", err
	}
	return kind + "=" + name, nil
}

// ValidateKind checks vendor/class.
func ValidateKind(kind string) error {
	vendor, class, ok := strings.Cut(kind, "/")
	if !ok || strings.Contains(class, "/") {
		return fmt.Errorf("%w: kind %q: expected vendor/class such as %s", ErrInvalidName, kind, DefaultKind)
	}
	if !valid(vendor, "-_.") {
		return fmt.Errorf("%w: vendor %q of kind %q: expected letters, digits, '-', '_' and '.', starting with a letter and ending with a letter or digit", ErrInvalidName, vendor, kind)
	}
	if !valid(class, "-_") {
		return fmt.Errorf("%w: class %q of kind %q: expected letters, digits, '-' and '_', starting with a letter and ending with a letter or digit", ErrInvalidName, class, kind)
	}
	return nil
}

// ValidateDeviceName checks the part after '='.
func ValidateDeviceName(name string) error {
	if name == "" || !isAlnum(rune(name[0])) || !isAlnum(rune(name[len(name)-1])) || strings.IndexFunc(name, func(r rune) bool {
		return !isAlnum(r) && !strings.ContainsRune("-_.:", r)
	}) >= 0 {
		return fmt.Errorf("%w: device name %q: expected letters, digits, '-', '_', '.' and ':', starting and ending with a letter or digit", ErrInvalidName, name)
	}
	return nil
}

// Annotations returns the container annotation that passes names to a
// runtime reading CDI from annotations: cdi.k8s.io/volcano-vgpu_<id> =
// comma-separated names. id tells this plugin's annotations apart (the pod
// UID: one container's annotations come from one Allocate).
func Annotations(id string, names []string) (map[string]string, error) {
	name := AnnotationPlugin + "_" + strings.ReplaceAll(id, "/", "_")
	if len(name) > maxAnnotationName || !isAlnum(rune(name[len(name)-1])) || strings.IndexFunc(name, func(r rune) bool {
		return !isAlnum(r) && !strings.ContainsRune("-_.", r)
	}) >= 0 {
		return nil, fmt.Errorf("%w: annotation key %s%s: expected at most %d letters, digits, '-', '_' and '.'", ErrInvalidName, AnnotationPrefix, name, maxAnnotationName)
	}
	return map[string]string{AnnotationPrefix + name: strings.Join(names, ",")}, nil
}

func valid(s, extra string) bool {
	if s == "" || !isLetter(rune(s[0])) || !isAlnum(rune(s[len(s)-1])) {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return !isAlnum(r) && !strings.ContainsRune(extra, r) }) < 0
}

func isLetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }
func isAlnum(r rune) bool  { return isLetter(r) || r >= '0' && r <= '9' }
