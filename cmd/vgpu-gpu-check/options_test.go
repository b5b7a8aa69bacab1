package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		check   func(t *testing.T, o options)
		wantErr string
	}{
		{name: "defaults: every group but deep, every program, 7m40s, 60 s a row", check: func(t *testing.T, o options) {
			if d := cmp.Diff(defaultGroups(), o.groups); d != "" {
				t.Errorf("groups (-want +got):\n%s", d)
			}
			if d := cmp.Diff(programNames(), o.use); d != "" {
				t.Errorf("programs (-want +got):\n%s", d)
			}
			if o.deadline != 7*time.Minute+40*time.Second || o.timeout != time.Minute || o.secs != 10 || o.capMiB != 8192 || o.share != "pytorch" || o.mpsControl != "nvidia-cuda-mps-control" || o.unconfined {
				t.Errorf("defaults: deadline %v timeout %v secs %g cap %d share %s mps-control %s unconfined %v", o.deadline, o.timeout, o.secs, o.capMiB, o.share, o.mpsControl, o.unconfined)
			}
		}},
		{name: "-unconfined: the controller's slots as limiter.confineSlots: false", args: []string{"-unconfined", "-only", "pair"}, check: func(t *testing.T, o options) {
			if !o.unconfined {
				t.Errorf("-unconfined not set: %+v", o)
			}
		}},
		{name: "-only keeps the run order whatever the flag's order", args: []string{"-only", "triple, memory,pair"}, check: func(t *testing.T, o options) {
			if d := cmp.Diff([]string{"memory", "pair", "triple"}, o.groups); d != "" {
				t.Errorf("groups (-want +got):\n%s", d)
			}
		}},
		{name: "durations and numbers", args: []string{"-deadline", "4m30s", "-scenario-timeout", "45s", "-seconds", "8", "-cap-mib", "4096", "-use", "probe", "-share-program", "probe"},
			check: func(t *testing.T, o options) {
				if o.deadline != 270*time.Second || o.timeout != 45*time.Second || o.secs != 8 || o.capMiB != 4096 || o.share != "probe" || len(o.use) != 1 {
					t.Errorf("got %+v", o)
				}
			}},
		{name: "unknown group names the valid ones", args: []string{"-only", "pairs"}, wantErr: `-only: unknown "pairs"; use a comma list of context,memory,guard,single,pair,slicing,mixed,triple,balance,mps,deep`},
		{name: "-skip leaves the mps rows out", args: []string{"-skip", "mps"}, check: func(t *testing.T, o options) {
			if d := cmp.Diff(defaultGroups()[:len(defaultGroups())-1], o.groups); d != "" {
				t.Errorf("groups (-want +got):\n%s", d)
			}
		}},
		{name: "-only deep: the rows the default leaves out", args: []string{"-only", "pair,deep"}, check: func(t *testing.T, o options) {
			if d := cmp.Diff([]string{"pair", "deep"}, o.groups); d != "" {
				t.Errorf("groups (-want +got):\n%s", d)
			}
		}},
		{name: "-skip applies to -only", args: []string{"-only", "pair,mps", "-skip", "mps,memory"}, check: func(t *testing.T, o options) {
			if d := cmp.Diff([]string{"pair"}, o.groups); d != "" {
				t.Errorf("groups (-want +got):\n%s", d)
			}
		}},
		{name: "-skip of every group -only names", args: []string{"-only", "mps", "-skip", "mps"}, wantErr: "-skip mps leaves no row group of -only mps"},
		{name: "-skip of an unknown group", args: []string{"-skip", "mpss"}, wantErr: `-skip: unknown "mpss"`},
		{name: "empty -mps-control", args: []string{"-mps-control", ""}, wantErr: "-mps-control is empty"},
		{name: "unknown program", args: []string{"-use", "jax"}, wantErr: `-use: unknown "jax"`},
		{name: "empty list", args: []string{"-use", ","}, wantErr: "-use: empty"},
		{name: "unknown share program", args: []string{"-share-program", "tf"}, wantErr: `-share-program "tf": use one of pytorch, cupy, probe`},
		{name: "a row timeout shorter than a share row", args: []string{"-scenario-timeout", "12s"}, wantErr: "raise -scenario-timeout or lower -seconds"},
		{name: "a short timeout is fine for memory rows only", args: []string{"-scenario-timeout", "12s", "-only", "memory"}, check: func(t *testing.T, o options) {
			if o.timeout != 12*time.Second {
				t.Errorf("timeout %v", o.timeout)
			}
		}},
		{name: "non-positive deadline", args: []string{"-deadline", "0s"}, wantErr: "-deadline must be positive"},
		{name: "share rows too short to settle", args: []string{"-seconds", "1"}, wantErr: "use at least 2"},
		{name: "cap below one chunk", args: []string{"-cap-mib", "512"}, wantErr: "use at least 1024"},
		{name: "positional arguments", args: []string{"memory"}, wantErr: "every setting is a flag"},
		{name: "unknown flag", args: []string{"-memory-only"}, wantErr: "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseOptions(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}
