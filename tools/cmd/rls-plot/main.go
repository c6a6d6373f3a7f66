// Command rls-plot turns rls-load JSON lines into a PNG: throughput and p99
// latency against concurrency, one line per label (the addr when a line has
// no label). Repeated runs of one label at one concurrency are averaged.
//
//	rls-plot -o docs/img/perf-floor.png -title "gRPC floor" bench/results/floor-*.jsonl
//
// The picture is drawn with gonum.org/v1/plot: two panels sharing a log2
// concurrency axis, each point labelled with its value.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rls-plot:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("rls-plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "output PNG file (required)")
	title := fs.String("title", "envoy-rls load: throughput and p99 vs concurrency", "plot title")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rls-plot -o out.png [-title T] results.jsonl...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		fs.Usage()
		return errors.New("need -o and at least one JSONL file")
	}
	var pts []point
	for _, name := range fs.Args() {
		p, err := readFile(name)
		if err != nil {
			return err
		}
		pts = append(pts, p...)
	}
	series := group(pts)
	if len(series) == 0 {
		return errors.New("no result lines in the input")
	}
	img, err := render(series, *title)
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	return f.Close()
}

// point is the part of an rls-load result line that the plot uses.
type point struct {
	Label       string  `json:"label"`
	Addr        string  `json:"addr"`
	Concurrency int     `json:"concurrency"`
	RPS         float64 `json:"rps"`
	P99Ms       float64 `json:"p99_ms"`
}

func readFile(name string) ([]point, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readPoints(f, name)
}

// readPoints decodes one result per non-empty line.
func readPoints(r io.Reader, name string) ([]point, error) {
	var pts []point
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var p point
		if err := json.Unmarshal(line, &p); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		if p.Concurrency < 1 {
			return nil, fmt.Errorf("%s:%d: concurrency %d", name, n, p.Concurrency)
		}
		if p.Label == "" {
			p.Label = p.Addr
		}
		pts = append(pts, p)
	}
	return pts, sc.Err()
}

// series is one label's points, sorted by concurrency.
type series struct {
	label string
	pts   []point
}

// group makes one series per label, in order of first appearance, averaging
// repeated concurrencies.
func group(pts []point) []series {
	var out []series
	index := map[string]int{}
	for _, p := range pts {
		i, ok := index[p.Label]
		if !ok {
			i = len(out)
			index[p.Label] = i
			out = append(out, series{label: p.Label})
		}
		out[i].pts = append(out[i].pts, p)
	}
	for i := range out {
		s := &out[i]
		slices.SortStableFunc(s.pts, func(a, b point) int { return cmp.Compare(a.Concurrency, b.Concurrency) })
		var merged []point
		for j := 0; j < len(s.pts); {
			k, sum := j, point{Label: s.label, Concurrency: s.pts[j].Concurrency}
			for ; k < len(s.pts) && s.pts[k].Concurrency == sum.Concurrency; k++ {
				sum.RPS += s.pts[k].RPS
				sum.P99Ms += s.pts[k].P99Ms
			}
			n := float64(k - j)
			sum.RPS /= n
			sum.P99Ms /= n
			merged = append(merged, sum)
			j = k
		}
		s.pts = merged
	}
	return out
}

// Size of the picture, in pixels at dpi.
const (
	imgW = 1200
	imgH = 1040
	dpi  = 96
)

// palette returns the colour of series i.
func palette(i int) color.RGBA {
	p := [...]color.RGBA{
		{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255},
		{255, 127, 14, 255}, {148, 103, 189, 255}, {140, 86, 75, 255},
		{227, 119, 194, 255}, {23, 190, 207, 255},
	}
	return p[i%len(p)]
}

// render draws the throughput panel above the p99 panel, both against
// concurrency on a log2 axis, one coloured line per series.
func render(ss []series, title string) (*vgimg.Canvas, error) {
	var xs []int
	for _, s := range ss {
		for _, p := range s.pts {
			xs = append(xs, p.Concurrency)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)

	top, err := panel(ss, xs, "throughput (decisions/s)", func(p point) float64 { return p.RPS })
	if err != nil {
		return nil, err
	}
	top.Title.Text = title
	top.Title.TextStyle.Font.Size = vg.Points(15)
	bottom, err := panel(ss, xs, "p99 latency (ms)", func(p point) float64 { return p.P99Ms })
	if err != nil {
		return nil, err
	}
	img := vgimg.NewWith(vgimg.UseWH(imgW*vg.Inch/dpi, imgH*vg.Inch/dpi), vgimg.UseDPI(dpi),
		vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(8), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(16), PadY: vg.Points(24)}
	cs := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(cs[0][0])
	bottom.Draw(cs[1][0])
	return img, nil
}

// panel is one chart: a line with markers per series, each point labelled
// with its value, y from 0 to a round top, x the concurrencies xs on a log
// scale padded half a doubling on each side.
func panel(ss []series, xs []int, ylabel string, val func(point) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Y.Label.Text = ylabel
	p.X.Label.Text = "concurrency (calls in flight, log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Min, p.X.Max = float64(xs[0])/math.Sqrt2, float64(xs[len(xs)-1])*math.Sqrt2
	var xt plot.ConstantTicks
	for _, c := range xs {
		xt = append(xt, plot.Tick{Value: float64(c), Label: strconv.Itoa(c)})
	}
	p.X.Tick.Marker = xt

	maxV := 0.0
	for _, s := range ss {
		for _, pt := range s.pts {
			maxV = math.Max(maxV, val(pt))
		}
	}
	step, yTop := niceScale(maxV)
	p.Y.Min, p.Y.Max = 0, yTop
	p.Y.Tick.Marker = plot.TickerFunc(func(_, _ float64) []plot.Tick {
		var ts []plot.Tick
		for v := 0.0; v <= yTop+step/2; v += step {
			ts = append(ts, plot.Tick{Value: v, Label: tickLabel(v, step)})
		}
		return ts
	})
	grid := plotter.NewGrid()
	grid.Vertical.Width = 0
	p.Add(grid)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(12), -vg.Points(6)
	p.Legend.TextStyle.Font.Size = vg.Points(11)

	for i, s := range ss {
		xys := make(plotter.XYs, len(s.pts))
		labels := make([]string, len(s.pts))
		for j, pt := range s.pts {
			xys[j] = plotter.XY{X: float64(pt.Concurrency), Y: val(pt)}
			labels[j] = valueLabel(val(pt))
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", s.label, err)
		}
		c := palette(i)
		line.Color, line.Width = c, vg.Points(2)
		points.Shape, points.Color, points.Radius = draw.CircleGlyph{}, c, vg.Points(3.5)
		values, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", s.label, err)
		}
		for k := range values.TextStyle {
			values.TextStyle[k].Color = c
			values.TextStyle[k].Font.Size = vg.Points(9)
		}
		values.Offset = vg.Point{X: vg.Points(6), Y: vg.Points(4)}
		p.Add(line, points, values)
		p.Legend.Add(s.label, line, points)
	}
	return p, nil
}

// niceScale returns a tick step of 1, 2 or 5 × 10^k giving about five
// ticks, and the axis top (a multiple of the step at or above max).
func niceScale(max float64) (step, top float64) {
	if !(max > 0) {
		return 1, 1
	}
	raw := max / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	top = math.Ceil(max/step) * step
	if top < max*1.05 { // leave room above the highest point
		top += step
	}
	return step, top
}

// tickLabel formats an axis value: thousands as "K" when the step is ≥ 1000.
func tickLabel(v, step float64) string {
	switch {
	case v == 0:
		return "0"
	case step >= 1000:
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "K"
	case step >= 1:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	d := int(math.Ceil(-math.Log10(step)))
	return strconv.FormatFloat(v, 'f', d, 64)
}

// valueLabel formats a data point's value with three significant digits.
func valueLabel(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + "K"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
