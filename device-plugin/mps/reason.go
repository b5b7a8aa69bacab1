package mps

import "errors"

// ErrComputeMode is wrapped when a GPU's compute mode cannot be set.
var ErrComputeMode = errors.New("MPS GPU's compute mode cannot be set")

// Why an MPS GPU is unhealthy, as the metrics label it: a short, bounded
// vocabulary (the full reason is in the GPU's health and the log).
const (
	ReasonFault       = "server_fault" // a server reported a fatal fault: its clients have failed
	ReasonComputeMode = "compute_mode" // EXCLUSIVE_PROCESS could not be set
	ReasonStart       = "daemon_start" // the control daemon could not be started
	ReasonServerStart = "server_start" // the daemon started no ACTIVE server
	ReasonNoAnswer    = "no_answer"    // the control daemon does not answer
	ReasonOther       = "other"
)

type sentinelReason struct {
	err    error
	reason string
}

// reasonTable maps each sentinel to its label, most specific first (an
// error may wrap several: a daemon that started but does not answer is a
// start failure).
func reasonTable() [5]sentinelReason {
	return [...]sentinelReason{
		{ErrFault, ReasonFault},
		{ErrComputeMode, ReasonComputeMode},
		{ErrStart, ReasonStart},
		{ErrServerStart, ReasonServerStart},
		{ErrNoAnswer, ReasonNoAnswer},
	}
}

// Reason is the label of an MPS health error ("" for nil).
func Reason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range reasonTable() {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return ReasonOther
}
