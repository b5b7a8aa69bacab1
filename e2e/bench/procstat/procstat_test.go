package procstat

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	// Command name with a space and a parenthesis; utime 1234, stime 266 ticks → 15 s.
	stat := "4242 (vc sched) uler) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 266 0 0 20 0 12 0 100 200 300"
	status := "Name:\tvc-scheduler\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t12\n"
	got, err := Parse(stat, status)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Sample{CPUSeconds: 15, RSSKiB: 102400, PeakRSSKiB: 204800}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"no parens", "1 (x) S 1 2"} {
		if _, err := Parse(bad, status); err == nil {
			t.Errorf("stat %q: want an error", bad)
		}
	}
}

func TestReadSelf(t *testing.T) {
	s, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.PeakRSSKiB <= 0 || s.RSSKiB <= 0 || s.PeakRSSKiB < s.RSSKiB {
		t.Errorf("sample of this test process %+v: want positive RSS below its peak", s)
	}
}
