package runner

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// profile takes a CPU profile of vc-scheduler over d through its pprof
// endpoint (cluster.Config.SchedulerPprof) and writes it to path; the
// returned wait blocks until it is written and returns what failed.
func profile(ctx context.Context, port int, d time.Duration, path string) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", port, max(int(d.Seconds()), 1))
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("vc-scheduler CPU profile: %w", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				return fmt.Errorf("vc-scheduler CPU profile: %s: HTTP %d %s (started without --enable-pprof?)", url, resp.StatusCode, body)
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				f.Close()
				return fmt.Errorf("vc-scheduler CPU profile: %w", err)
			}
			return f.Close()
		}()
	}()
	return func() error { return <-done }
}
