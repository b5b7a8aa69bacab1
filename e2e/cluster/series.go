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

// Sample is one labelled volcano_vgpu sample of a /metrics page.
type Sample struct {
	Name, Labels string // Labels as written: a="x",b="y"
	Value        float64
}

// Label is the value of label key, "" when the sample has none.
func (s Sample) Label(key string) string {
	_, rest, ok := strings.Cut(","+s.Labels, ","+key+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// Samples scrapes the /metrics page at url: every labelled volcano_vgpu
// sample on it.
func Samples(ctx context.Context, url string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []Sample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := seriesLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, err
		}
		out = append(out, Sample{Name: m[1], Labels: m[2], Value: v})
	}
	return out, sc.Err()
}

// PodSeries scrapes a device plugin's /metrics at url and returns, by series
// name, the value of each volcano_vgpu series whose labels name pod (and
// container, when not empty).
func PodSeries(ctx context.Context, url, pod, container string) (map[string]float64, error) {
	samples, err := Samples(ctx, url)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range samples {
		if s.Label("pod") == pod && (container == "" || s.Label("container") == container) {
			out[s.Name] = s.Value
		}
	}
	return out, nil
}
