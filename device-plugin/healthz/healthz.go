// Package healthz serves named checks over HTTP: 200 when every check
// passes, 503 otherwise, with one line per check saying what is wrong.
package healthz

import (
	"fmt"
	"net/http"
	"strings"
)

// Check is one named condition; Fn returns nil when it holds.
type Check struct {
	Name string
	Fn   func() error
}

// Handler answers with the result of checks.
func Handler(checks ...Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var b strings.Builder
		failed := false
		for _, c := range checks {
			if err := c.Fn(); err != nil {
				failed = true
				fmt.Fprintf(&b, "[-]%s failed: %v\n", c.Name, err)
				continue
			}
			fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
			b.WriteString("unhealthy\n")
		} else {
			b.WriteString("ok\n")
		}
		_, _ = w.Write([]byte(b.String()))
	})
}
