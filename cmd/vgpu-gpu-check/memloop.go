package main

import (
	"fmt"
	"time"
)

const (
	chunkMiB   = 1024 // every memory loop allocates 1 GiB at a time
	spareMiB   = 2048 // left free on the card: the tenant's own context, the allocator's slack, other processes
	pastCapMiB = 2048 // how far past the cap a loop asks, to show the refusal
)

// memBound is how many chunks a memory row may ask for: enough to go
// pastCapMiB beyond the cap, never more than the card has free (less
// spareMiB). Managed memory can oversubscribe a real GPU and hang it, so the
// card's free memory bounds every path. It fails when the card cannot show a
// refusal at this cap.
func memBound(capMiB, freeMiB uint64) (int, error) {
	want := (capMiB + pastCapMiB) / chunkMiB
	room := uint64(0)
	if freeMiB > spareMiB {
		room = (freeMiB - spareMiB) / chunkMiB
	}
	if room*chunkMiB <= capMiB {
		most := uint64(0)
		if room > 1 {
			most = (room - 1) * chunkMiB
		}
		return 0, fmt.Errorf("the GPU has %d MiB free, too little to allocate past a %d MiB cap with %d MiB to spare: lower -cap-mib to at most %d, or free GPU memory", freeMiB, capMiB, spareMiB, most)
	}
	return int(min(want, room)), nil
}

// memSeconds bounds a memory loop in time: half the row's timeout, so that it
// ends and reports before the row is cut.
func memSeconds(timeout time.Duration) float64 {
	return max(timeout.Seconds()/2, 1)
}
