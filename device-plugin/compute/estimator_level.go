package compute

// The basis of the estimator's costs and their level: which windows the
// pooled cost rests on, and what a rate or a fallback multiplies it by.

// level corrects the absolute level of fit's costs: the pooled cost of all
// windows over that of the unsaturated ones fit uses. The split needs only
// the costs' ratios, and unsaturated windows give them best; the fallback
// rate needs the level, and unsaturated windows are biased there: they are
// the windows in which a backlog drains, its work read as the cost of their
// own launches (133-137 ns per unit against a true 125 in a 30 + 60 pair
// whose loop swung in and out of saturation; after the controller died the
// pair held 27 + 55, fake driver). Across all windows what was launched and
// not run yet is bounded by the queue (a launch blocks while it is full),
// so the pooled cost of all of them is unbiased. 1 when either is unknown.
func (e *estimator) level() float64 {
	return e.levelOver(false, e.startsOnly())
}

// levelOver is the level of fitOver(steadyOnly)'s basis against all windows
// (steadyOnly: all steady ones; level is levelOver(false)).
func (e *estimator) levelOver(steadyOnly, startsOnly bool) float64 {
	var busy, units, busyAll, unitsAll float64
	for _, o := range e.obs {
		if !wide(o, steadyOnly) {
			continue
		}
		var u float64
		for _, x := range o.units {
			u += x
		}
		busyAll += o.busy
		unitsAll += u
		if counts(o, steadyOnly, startsOnly) {
			busy += o.busy
			units += u
		}
	}
	if busy <= 0 || units <= 0 || busyAll <= 0 || unitsAll <= 0 {
		return 1
	}
	return (busyAll / unitsAll) / (busy / units)
}

// startsOnly says whether a fit should pool one tenant's steady windows,
// saturated ones included, rather than the unsaturated windows of starts:
// where that tenant alone launched in every steady window and none of them
// is unsaturated. Alone, what it launched and did not run is bounded by its
// queue, so its saturated windows give its cost; a start's window often
// does not (its first launches' busy time fell outside the window, between
// device samples 200 ms apart that average the last 166 ms): one such window
// put a lone tenant's cost at 6.9 ns per unit for a true 125, and at 90% it
// held the whole GPU for 7 s (83.1 over the second half of 12 s, simulated).
// Not with several tenants: a saturated GPU's split is its queues', and
// the pooled cost of a GEMM beside an elementwise program swung to 3683 ns
// per unit and starved both for a second (27.9 + 63.2 for 30 + 60,
// simulated).
func (e *estimator) startsOnly() bool {
	one := ""
	for _, o := range e.obs {
		if !o.steady {
			continue
		}
		if !o.saturated {
			return false
		}
		for key, u := range o.units {
			if u > 0 && key != one {
				if one != "" {
					return false
				}
				one = key
			}
		}
	}
	return one != ""
}

// startsLevel is what fit's costs are multiplied by for a rate where its
// basis holds starts' windows only (no window of it is steady) and reads
// below the steady windows: their pooled cost over the basis's, where
// higher; 1 otherwise. A start's window can read a fraction of what its
// launches cost (their busy time fell between device samples 200 ms apart
// that average the last 166 ms: 8.9 ns per unit for a true 125), and where
// every steady window after it is saturated (several tenants, so not
// startsOnly) nothing replaced it: a 30 + 60 pair launched at rates 14
// times too high for 7 s, split the GPU by its queues and then swung below
// its shares (27.5 + 55.2, simulated). Saturated windows read low if
// anything (what was launched and not run is queued), so they raise a rate
// only where its basis is lower still. Not all windows (level): a start's
// first one holds busy time of launches never charged (level 7.7 at the
// start of a pair whose basis was right).
func (e *estimator) startsLevel() float64 {
	startsOnly := e.startsOnly()
	var bb, bu, sb, su float64
	for _, o := range e.obs {
		var u float64
		for _, x := range o.units {
			u += x
		}
		switch {
		case counts(o, false, startsOnly) && o.steady:
			return 1
		case counts(o, false, startsOnly):
			bb, bu = bb+o.busy, bu+u
		case o.steady:
			sb, su = sb+o.busy, su+u
		}
	}
	if bb <= 0 || bu <= 0 || sb <= 0 || su <= 0 {
		return 1
	}
	if r := (sb / su) / (bb / bu); r >= startsOff {
		return r
	}
	return 1
}

// counts says whether a window is in fit's basis (steadyOnly: steady's).
func counts(o observation, steadyOnly, startsOnly bool) bool {
	if startsOnly && !steadyOnly {
		return o.steady
	}
	return !o.saturated && (o.steady || !steadyOnly)
}
