package mps

import (
	"errors"
	"fmt"
	"testing"
)

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{name: "healthy", err: nil, want: ""},
		{name: "a daemon that does not answer", err: fmt.Errorf("%w: GPU-a: get_server_list", ErrNoAnswer), want: ReasonNoAnswer},
		{name: "a restart attempt failed too: still the missing answer", err: fmt.Errorf("%w; starting it again failed: %v", ErrNoAnswer, ErrStart), want: ReasonNoAnswer},
		{name: "a faulted server", err: fmt.Errorf("%w: GPU-a: server 12: fatal", ErrFault), want: ReasonFault},
		{name: "a daemon that started but does not answer is a start failure", err: fmt.Errorf("%w: started but does not answer: %w", ErrStart, ErrNoAnswer), want: ReasonStart},
		{name: "compute mode", err: fmt.Errorf("%w: setting EXCLUSIVE_PROCESS: not permitted", ErrComputeMode), want: ReasonComputeMode},
		{name: "a fresh server not ACTIVE", err: fmt.Errorf("%w: fresh server 7 is INIT", ErrServerStart), want: ReasonServerStart},
		{name: "anything else", err: errors.New("disk full"), want: ReasonOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Reason(tc.err); got != tc.want {
				t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}
