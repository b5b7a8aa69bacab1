// Package docs holds the user's documents; its test checks that their links
// lead somewhere.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
	fence   = regexp.MustCompile("(?ms)^```.*?^```")
)

// anchor is the fragment a Markdown renderer (GitHub's) gives a heading:
// lower case, punctuation dropped, spaces as hyphens.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, path string) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
		out[anchor(m[1])] = true
	}
	return out
}

// TestLinks: every relative link of README.md and docs/*.md names a file of
// the repository, and a #fragment one of that document's headings.
func TestLinks(t *testing.T) {
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join("..", "README.md"), filepath.Join("..", "e2e", "README.md"), filepath.Join("..", "vcuda", "README.md")}, docs...)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s links to %s, which does not exist: fix the link or restore the file", f, target)
				continue
			}
			if frag != "" && strings.HasSuffix(dest, ".md") && !anchors(t, dest)[frag] {
				t.Errorf("%s links to %s, but %s has no heading #%s: fix the link or the heading", f, target, dest, frag)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d links, want at least 20: has the link pattern stopped matching?", checked)
	}
}

func TestAnchor(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Figures", "figures"},
		{"The real-GPU check", "the-real-gpu-check"},
		{"Memory: what a context takes counts against the cap", "memory-what-a-context-takes-counts-against-the-cap"},
		{"`kubectl vgpu`", "kubectl-vgpu"},
		{"The controller (device-plugin/compute)", "the-controller-device-plugincompute"},
	} {
		t.Run(tc.heading, func(t *testing.T) {
			if got := anchor(tc.heading); got != tc.want {
				t.Errorf("anchor(%q) = %q, want %q", tc.heading, got, tc.want)
			}
		})
	}
}
