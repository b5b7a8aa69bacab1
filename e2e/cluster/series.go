package cluster

import (
	"bufio"
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

var seriesLine = regexp.MustCompile(`^(volcano_vgpu_[a-z_]+)\{(.*)\} (\S+)$`)

// PodSeries scrapes a device plugin's /metrics at url and returns, by series
// name, the value of each volcano_vgpu series whose labels name pod (and
// container, when not empty).
func PodSeries(ctx context.Context, url, pod, container string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := seriesLine.FindStringSubmatch(sc.Text())
		if m == nil || !strings.Contains(m[2], `pod="`+pod+`"`) ||
			(container != "" && !strings.Contains(m[2], `container="`+container+`"`)) {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, err
		}
		out[m[1]] = v
	}
	return out, sc.Err()
}
