package transient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
)

var pods = schema.GroupResource{Resource: "pods"}

// post wraps err the way net/http hands a failed request to client-go.
func post(err error) error {
	return &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/api/v1/namespaces/n/pods", Err: err}
}

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil is not a failure", nil, ""},
		{"the apiserver resets the stream of a handler out of time",
			post(http2.StreamError{StreamID: 7119, Code: http2.ErrCodeInternal}), StreamReset},
		{"a refused stream", post(http2.StreamError{StreamID: 1, Code: http2.ErrCodeRefusedStream}), StreamReset},
		{"connection reset by peer",
			post(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), ConnectionReset},
		{"connection refused (apiserver restarting)",
			post(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), Refused},
		{"unexpected EOF", post(io.ErrUnexpectedEOF), ConnectionClosed},
		{"GOAWAY", post(errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1")), ConnectionClosed},
		{"a network timeout", post(&net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}), NetTimeout},
		{"a webhook that timed out, failing closed (500)",
			apierrors.NewInternalError(errors.New(`failed calling webhook "validate.pods.validate.volcano.sh": context deadline exceeded`)), Internal},
		{"429 from priority and fairness", apierrors.NewTooManyRequests("too many requests", 1), TooManyRequests},
		{"503", apierrors.NewServiceUnavailable("etcd leader changed"), Unavailable},
		{"504 gateway timeout", apierrors.NewTimeoutError("request did not complete", 0), ServerTimeout},
		{"server timeout", apierrors.NewServerTimeout(pods, "create", 1), ServerTimeout},
		{"a 502 from a proxy reads as a 500", apierrors.NewGenericServerResponse(502, "POST", pods, "", "bad gateway", 0, true), Internal},
		{"another 5xx", &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 507}}, ServerError},
		{"a wrapped 500 is still one", fmt.Errorf("creating pod p: %w", apierrors.NewInternalError(errors.New("x"))), Internal},
		{"invalid: the same request fails again", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", field.ErrorList{field.Required(field.NewPath("spec"), "")}), ""},
		{"denied by a webhook", apierrors.NewForbidden(pods, "p", errors.New("admission webhook denied the request")), ""},
		{"already exists on a first attempt", apierrors.NewAlreadyExists(pods, "p"), ""},
		{"not found (namespace gone)", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "n"), ""},
		{"our own cancellation", post(context.Canceled), ""},
		{"our own deadline, though a net.Error timeout", post(context.DeadlineExceeded), ""},
		{"an unknown error", errors.New("something else"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Reason(tc.err); got != tc.want {
				t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
			}
			if got := Is(tc.err); got != (tc.want != "") {
				t.Errorf("Is(%v) = %v", tc.err, got)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestStatsString(t *testing.T) {
	var s Stats
	for range 3 {
		s.add(StreamReset)
	}
	s.add(Internal)
	if got, want := s.String(), "3 stream reset, 1 500 internal error"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if s.Total() != 4 {
		t.Errorf("Total() = %d, want 4", s.Total())
	}
}

func TestCreateRetries(t *testing.T) {
	busy := apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
	exists := apierrors.NewAlreadyExists(schema.GroupResource{Resource: "pods"}, "p")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("quota"))
	reset := post(http2.StreamError{StreamID: 7119, Code: http2.ErrCodeInternal})
	tests := []struct {
		name      string
		errs      []error // one per call; nil succeeds
		wantErr   bool
		wantCalls int
	}{
		{name: "success at once", errs: []error{nil}, wantCalls: 1},
		{name: "a timeout is retried", errs: []error{busy, nil}, wantCalls: 2},
		{name: "a timed-out create that landed counts as created", errs: []error{busy, exists}, wantCalls: 2},
		{name: "already exists on the first call is an error", errs: []error{exists}, wantErr: true, wantCalls: 1},
		{name: "a reset stream is retried", errs: []error{reset, reset, nil}, wantCalls: 3},
		{name: "a refusal is not retried", errs: []error{forbidden}, wantErr: true, wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			r := Retrier{Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 5}}
			err := r.Create(t.Context(), func(context.Context) error {
				calls++
				return tc.errs[calls-1]
			})
			if (err != nil) != tc.wantErr || calls != tc.wantCalls {
				t.Errorf("err = %v after %d calls; want error %t after %d", err, calls, tc.wantErr, tc.wantCalls)
			}
		})
	}
}
