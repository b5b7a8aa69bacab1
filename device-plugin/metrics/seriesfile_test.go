package metrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSeriesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "series.txt")
	names := []string{"a_total", "b_bytes"}
	if err := SeriesFile(path, names, false); err == nil {
		t.Error("no file: want an error")
	}
	if err := SeriesFile(path, names, true); err != nil {
		t.Fatal(err)
	}
	if err := SeriesFile(path, names, false); err != nil {
		t.Errorf("the file just written: %v", err)
	}
	err := SeriesFile(path, []string{"a_total", "c_seconds"}, false)
	if err == nil || !strings.Contains(err.Error(), "not exported [b_bytes]") || !strings.Contains(err.Error(), "not listed [c_seconds]") {
		t.Errorf("b gone, c new: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "a_total\nb_bytes\n" {
		t.Errorf("a check rewrote the file: %q", b)
	}
}
