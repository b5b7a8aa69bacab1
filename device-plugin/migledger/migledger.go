// Package migledger keeps, on the node, the MIG instances the device plugin
// handed to pods: which GPU instance (GPU, placement, MIG device UUID) went
// to which pod, and whether the plugin created it on demand. It outlives the
// plugin (<stateDir>/mig.json), so a restarted plugin knows which instances
// are its own to destroy once their pods are gone, and never touches one it
// did not create (a fixed geometry's, one an administrator made).
package migledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/atomicfile"
)

// File is the ledger's name under the state directory.
const File = "mig.json"

// Version is the version of the ledger file.
const Version = "v1"

// Entry is one MIG instance handed to a pod.
type Entry struct {
	// GPU is the UUID of the physical GPU.
	GPU       string           `json:"gpu"`
	Profile   string           `json:"profile"`
	Placement api.MIGPlacement `json:"placement"`
	// UUID of the MIG device (MIG-…).
	UUID string `json:"uuid"`
	// PodUID is the pod the instance serves.
	PodUID string `json:"podUID"`
	// Created: the plugin created the instance for a pod on an on-demand
	// GPU, so it destroys it once no pod holds it.
	Created bool `json:"created,omitempty"`
}

// Key is where an instance sits: its GPU and placement.
type Key struct {
	GPU       string
	Placement api.MIGPlacement
}

// Key of e.
func (e Entry) Key() Key { return Key{GPU: e.GPU, Placement: e.Placement} }

type file struct {
	Version   string  `json:"version"`
	Instances []Entry `json:"instances"`
}

// Ledger is the instances of one node, in the file at Path. It is not safe
// for concurrent use: the plugin holds its lock around it.
type Ledger struct {
	Path    string
	entries map[Key]Entry
}

// Load reads the ledger at path; a missing file is an empty ledger.
func Load(path string) (*Ledger, error) {
	l := &Ledger{Path: path, entries: map[Key]Entry{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return l, nil
	case err != nil:
		return nil, fmt.Errorf("reading the MIG ledger %s: %w", path, err)
	}
	var f file
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("MIG ledger %s: %w (remove the file: the plugin then adopts the instances of live pods again and leaves the others)", path, err)
	}
	if f.Version != Version {
		return nil, fmt.Errorf("MIG ledger %s: field version: expected %s, got %q (remove the file: the plugin then adopts the instances of live pods again and leaves the others)", path, Version, f.Version)
	}
	for i, e := range f.Instances {
		if e.GPU == "" || e.Placement.Size < 1 || e.Placement.Start < 0 {
			return nil, fmt.Errorf("MIG ledger %s: instances[%d]: expected a GPU and a placement, got %+v", path, i, e)
		}
		l.entries[e.Key()] = e
	}
	return l, nil
}

// Get returns the entry at k.
func (l *Ledger) Get(k Key) (Entry, bool) {
	e, ok := l.entries[k]
	return e, ok
}

// Entries lists the entries by GPU, then placement.
func (l *Ledger) Entries() []Entry {
	out := make([]Entry, 0, len(l.entries))
	for _, e := range l.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if a.GPU != b.GPU {
			if a.GPU < b.GPU {
				return -1
			}
			return 1
		}
		return a.Placement.Start - b.Placement.Start
	})
	return out
}

// Put records e (replacing what was at its key) and saves the ledger.
func (l *Ledger) Put(e Entry) error {
	old, had := l.entries[e.Key()]
	l.entries[e.Key()] = e
	if err := l.save(); err != nil {
		if had {
			l.entries[e.Key()] = old
		} else {
			delete(l.entries, e.Key())
		}
		return err
	}
	return nil
}

// Delete forgets the entry at k and saves the ledger.
func (l *Ledger) Delete(k Key) error {
	old, had := l.entries[k]
	if !had {
		return nil
	}
	delete(l.entries, k)
	if err := l.save(); err != nil {
		l.entries[k] = old
		return err
	}
	return nil
}

func (l *Ledger) save() error {
	b, err := json.MarshalIndent(file{Version: Version, Instances: l.Entries()}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(l.Path), 0o755); err != nil {
		return fmt.Errorf("writing the MIG ledger: %w", err)
	}
	if err := atomicfile.Write(l.Path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the MIG ledger %s: %w", l.Path, err)
	}
	return nil
}
