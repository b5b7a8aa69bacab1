package transient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// What the fake apiserver does with one pod create.
type answer int

const (
	reset   answer = iota // abort the handler: HTTP/2 RST_STREAM INTERNAL_ERROR, as kube-apiserver's timeout filter does
	created               // 201
	exists                // 409: an earlier, reset attempt had written it
	webhook               // 500: a webhook timed out, failing closed
	invalid               // 422
	busy                  // 429
)

// fakeAPIServer is an HTTP/2 TLS server answering pod creates from a
// script, one answer per request, then created. The resets are real
// RST_STREAM frames, read by client-go's own transport.
type fakeAPIServer struct {
	mu     sync.Mutex
	script []answer
	seen   int
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	a := created
	if f.seen < len(f.script) {
		a = f.script[f.seen]
	}
	f.seen++
	f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	status := func(err *apierrors.StatusError) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(err.ErrStatus.Code))
		s := err.ErrStatus
		s.Kind, s.APIVersion = "Status", "v1"
		_ = json.NewEncoder(w).Encode(s)
	}
	pods := schema.GroupResource{Resource: "pods"}
	switch a {
	case reset:
		panic(http.ErrAbortHandler)
	case created:
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	case exists:
		status(apierrors.NewAlreadyExists(pods, "p"))
	case webhook:
		status(apierrors.NewInternalError(errors.New(`failed calling webhook "validate.pods.validate.volcano.sh": context deadline exceeded`)))
	case invalid:
		status(apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil))
	case busy:
		status(apierrors.NewTooManyRequests("slow down", 0))
	}
}

func (f *fakeAPIServer) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

func TestCreateThroughResetStreams(t *testing.T) {
	for _, tc := range []struct {
		name      string
		script    []answer
		steps     int
		wantErr   error // nil, ErrGaveUp, or a check below
		permanent bool  // the error is the server's final answer
		requests  int
		stats     string
	}{
		{name: "two reset streams, then created", script: []answer{reset, reset, created}, steps: 5, requests: 3, stats: "2 stream reset"},
		{name: "a reset attempt had created it: already exists counts as created",
			script: []answer{reset, exists}, steps: 5, requests: 2, stats: "1 stream reset"},
		{name: "webhook timeouts and 429, then created", script: []answer{webhook, busy, webhook, created}, steps: 5, requests: 4,
			stats: "2 500 internal error, 1 429 too many requests"},
		{name: "already exists on the first attempt is the caller's problem", script: []answer{exists}, steps: 5, permanent: true, requests: 1},
		{name: "invalid is not retried", script: []answer{invalid}, steps: 5, permanent: true, requests: 1},
		{name: "resets past the last attempt give up with the reason",
			script: []answer{reset, reset, reset, reset}, steps: 3, wantErr: ErrGaveUp, requests: 3, stats: "3 stream reset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeAPIServer{script: tc.script}
			srv := httptest.NewUnstartedServer(fake)
			srv.EnableHTTP2 = true
			srv.Config.ErrorLog = nil
			srv.StartTLS()
			defer srv.Close()
			kube := newClient(t, srv)
			var stats Stats
			r := Retrier{Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: tc.steps},
				Pace: flowcontrol.NewTokenBucketRateLimiter(1000, 1), Stats: &stats}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n"}}
			err := r.Create(context.Background(), func(ctx context.Context) error {
				_, err := kube.CoreV1().Pods("n").Create(ctx, pod, metav1.CreateOptions{})
				return err
			})
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Create() = %v, want %v", err, tc.wantErr)
				}
				if Reason(err) != StreamReset {
					t.Errorf("Reason(%v) = %q, want the last failure's, %q", err, Reason(err), StreamReset)
				}
			case tc.permanent:
				if err == nil || Is(err) {
					t.Fatalf("Create() = %v, want the server's final answer", err)
				}
			case err != nil:
				t.Fatalf("Create() = %v, want created", err)
			}
			if got := fake.requests(); got != tc.requests {
				t.Errorf("requests = %d, want %d", got, tc.requests)
			}
			if diff := cmp.Diff(tc.stats, stats.String()); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
		})
	}
}

// newClient is client-go's clientset on the server's HTTP/2 TLS endpoint.
func newClient(t *testing.T, srv *httptest.Server) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

func TestCreateStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	r := Retrier{Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 100}}
	err := r.Create(ctx, func(context.Context) error {
		calls++
		if calls == 2 {
			cancel()
		}
		return apierrors.NewTooManyRequests("slow down", 0)
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create() = %v, want context.Canceled", err)
	}
	if calls != 2 {
		t.Errorf("calls = %d, want 2", calls)
	}
}
