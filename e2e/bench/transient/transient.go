// Package transient tells an API failure worth retrying (the apiserver or
// the path to it was overloaded for a moment) from one that the same request
// would meet again, and retries a create through the first kind, paced.
//
// On a loaded 2-core machine a burst of pod creations meets all of them:
// kube-apiserver resetting an HTTP/2 stream whose handler ran out of time
// ("stream error: stream ID 7119; INTERNAL_ERROR; received from peer"), a
// webhook that did not answer in its timeout (failing closed: 500), 429 from
// priority and fairness, 503/504.
package transient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/flowcontrol"
)

// Reasons of transient failures, as counted in Stats.
const (
	StreamReset      = "stream reset"      // HTTP/2 RST_STREAM from the server
	ConnectionReset  = "connection reset"  // ECONNRESET
	ConnectionClosed = "connection closed" // EOF, GOAWAY, broken connection
	Refused          = "connection refused"
	NetTimeout       = "network timeout"
	TooManyRequests  = "429 too many requests"
	ServerTimeout    = "server timeout" // 504, or a request the server gave up on
	Unavailable      = "503 unavailable"
	Internal         = "500 internal error" // e.g. a webhook that timed out, failing closed
	ServerError      = "other 5xx"
)

// Reason names the kind of transient failure err is, or returns "" when err
// is nil, is the caller's own cancellation, or is an answer the same request
// would get again (invalid, forbidden, not found, already exists, …).
func Reason(err error) string {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ""
	}
	// An answer from the apiserver first: its status says what happened.
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch {
		case apierrors.IsTooManyRequests(err):
			return TooManyRequests
		case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err):
			return ServerTimeout
		case apierrors.IsServiceUnavailable(err):
			return Unavailable
		case apierrors.IsInternalError(err):
			return Internal
		case status.Status().Code >= 500:
			return ServerError
		}
		return ""
	}
	var stream http2.StreamError
	switch {
	case errors.As(err, &stream):
		return StreamReset
	case utilnet.IsConnectionReset(err):
		return ConnectionReset
	case utilnet.IsConnectionRefused(err):
		return Refused
	case utilnet.IsProbableEOF(err), utilnet.IsHTTP2ConnectionLost(err):
		return ConnectionClosed
	case utilnet.IsTimeout(err):
		return NetTimeout
	}
	return ""
}

// Is reports whether err is worth retrying.
func Is(err error) bool { return Reason(err) != "" }

// Backoff is the default between attempts of one create: 0.2, 0.4, … s
// capped at 10 s, with jitter so that a burst's retries do not arrive
// together, 10 attempts in all (about 40 s).
func Backoff() wait.Backoff {
	return wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 10, Cap: 10 * time.Second}
}

// Stats counts the transient failures met, by reason; safe for concurrent use.
type Stats struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *Stats) add(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[reason]++
}

// Counts returns a copy of the counts by reason.
func (s *Stats) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.n)
}

// Total is the number of transient failures met.
func (s *Stats) Total() int {
	n := 0
	for _, v := range s.Counts() {
		n += v
	}
	return n
}

// String lists the counts, most frequent first ("12 stream reset, 3 500 internal error").
func (s *Stats) String() string {
	c := s.Counts()
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if c[keys[i]] != c[keys[j]] {
			return c[keys[i]] > c[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", c[k], k)
	}
	return strings.Join(parts, ", ")
}

// Retrier retries creates through transient failures.
type Retrier struct {
	Backoff wait.Backoff
	// Pace, when set, is waited on before every attempt, retries included,
	// so that the creators together stay under its rate.
	Pace flowcontrol.RateLimiter
	// Stats, when set, counts the transient failures met.
	Stats *Stats
}

// ErrGaveUp wraps the last transient failure of a create that ran out of attempts.
var ErrGaveUp = errors.New("still failing after every retry")

// Create calls create until it succeeds, fails for good, ctx ends, or the
// backoff's attempts are spent. A create that meets AlreadyExists after a
// transient failure counts as done: the failed attempt created the object
// after all (the server wrote it, then the answer was lost).
func (r Retrier) Create(ctx context.Context, create func(context.Context) error) error {
	attempts := 0
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, r.Backoff, func(ctx context.Context) (bool, error) {
		if r.Pace != nil {
			if err := r.Pace.Wait(ctx); err != nil {
				return false, err
			}
		}
		attempts++
		err := create(ctx)
		switch {
		case err == nil:
			return true, nil
		case last != nil && apierrors.IsAlreadyExists(err):
			return true, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		reason := Reason(err)
		if reason == "" {
			return false, err
		}
		if r.Stats != nil {
			r.Stats.add(reason)
		}
		last = err
		return false, nil
	})
	if err != nil && wait.Interrupted(err) && last != nil && ctx.Err() == nil {
		return fmt.Errorf("%w (%d attempts): %w", ErrGaveUp, attempts, last)
	}
	return err
}
