package report

import (
	"bytes"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// colors per setup, in table order.
var colors = map[string]color.Color{
	VGPU:        color.RGBA{R: 0x2b, G: 0x6c, B: 0xb0, A: 0xff},
	Deviceshare: color.RGBA{R: 0xd9, G: 0x5f, B: 0x0e, A: 0xff},
	CPUOnly:     color.RGBA{R: 0x88, G: 0x88, B: 0x88, A: 0xff},
	NoGPUPlugin: color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
}

// panel is one bar chart of the chart.
type panel struct {
	title, unit string
	value       func(Row) float64
}

var panels = []panel{
	{"Pods bound per second (higher is better)", "pods/s", func(r Row) float64 { return r.PodsPerSecond }},
	{"Scheduler CPU during the run (lower is better)", "CPU seconds", func(r Row) float64 { return r.SchedulerCPUSeconds }},
	{"Trace placed before the first unschedulable job", "% of pods", func(r Row) float64 { return 100 * r.PrefixPods }},
}

// Chart renders the rows as a PNG: one bar chart per panel, side by side.
func Chart(rows []Row) ([]byte, error) {
	const w, h = 12 * vg.Inch, 4 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Y.Label.Text = pn.unit
		p.Y.Min = 0
		names := make([]string, len(rows))
		for j, r := range rows {
			names[j] = r.Setup
			bar, err := plotter.NewBarChart(plotter.Values{pn.value(r)}, vg.Points(40))
			if err != nil {
				return nil, fmt.Errorf("chart %q: %w", pn.title, err)
			}
			bar.Color = colors[r.Setup]
			if bar.Color == nil {
				bar.Color = color.Black
			}
			bar.LineStyle.Width = 0
			bar.XMin = float64(j)
			p.Add(bar)
		}
		p.NominalX(names...)
		p.Draw(tiles.At(dc, i, 0))
	}
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
