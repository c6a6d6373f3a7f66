// Command rls-plot turns rls-load JSON lines into a PNG: throughput and p99
// latency against concurrency, one line per label (the addr when a line has
// no label). Repeated runs of one label at one concurrency are averaged.
//
//	rls-plot -o docs/img/perf-floor.png -title "gRPC floor" bench/results/floor-*.jsonl
//
// It uses only the standard library: its own 5×7 bitmap font and line
// drawing, written with image/png.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
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
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := png.Encode(f, render(series, *title).img); err != nil {
		f.Close()
		return err
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

// Layout of the picture, in pixels.
const (
	imgW       = 1200
	imgH       = 1040
	marginL    = 120
	marginR    = 40
	fontScale  = 2
	smallScale = 1
)

var (
	colWhite = color.RGBA{255, 255, 255, 255}
	colInk   = color.RGBA{30, 30, 30, 255}
	colGrid  = color.RGBA{200, 200, 200, 255}
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

func render(ss []series, title string) *canvas {
	cv := newCanvas(imgW, imgH, colWhite)
	cv.text((imgW-textWidth(title, fontScale))/2, 16, title, fontScale, colInk)

	// Legend: one row of colour swatches under the title, wrapping.
	x, y := marginL, 50
	for i, s := range ss {
		w := 30 + textWidth(s.label, fontScale) + 30
		if x+w > imgW-marginR {
			x, y = marginL, y+24
		}
		cv.line(x, y+7, x+22, y+7, 3, palette(i))
		cv.disc(x+11, y+7, 4, palette(i))
		cv.text(x+30, y, s.label, fontScale, colInk)
		x += w
	}

	var xs []int
	for _, s := range ss {
		for _, p := range s.pts {
			xs = append(xs, p.Concurrency)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)

	// Each panel: title (26 px above), plot area, tick labels and axis
	// title (60 px below), then a gap.
	top := y + 64
	panelH := (imgH - top) / 2
	panel(cv, ss, xs, top, panelH-110, "throughput (decisions/s)", func(p point) float64 { return p.RPS })
	panel(cv, ss, xs, top+panelH, panelH-110, "p99 latency (ms)", func(p point) float64 { return p.P99Ms })
	return cv
}

// panel draws one chart: axes, grid, ticks, and a line per series, with the
// plot area's top at y0 and height h.
func panel(cv *canvas, ss []series, xs []int, y0, h int, title string, val func(point) float64) {
	x0, x1 := marginL, imgW-marginR
	y1 := y0 + h
	cv.text(x0, y0-26, title, fontScale, colInk)

	maxV := 0.0
	for _, s := range ss {
		for _, p := range s.pts {
			maxV = math.Max(maxV, val(p))
		}
	}
	step, top := niceScale(maxV)
	py := func(v float64) int { return y1 - int(math.Round(v/top*float64(h))) }
	for v := 0.0; v <= top+step/2; v += step {
		yy := py(v)
		if v > 0 {
			cv.dashedHLine(x0+1, x1, yy, colGrid)
		}
		cv.line(x0-6, yy, x0, yy, 1, colInk)
		lbl := tickLabel(v, step)
		cv.text(x0-10-textWidth(lbl, fontScale), yy-7, lbl, fontScale, colInk)
	}

	// x: log2 of concurrency, padded half a doubling on each side.
	lo, hi := math.Log2(float64(xs[0]))-0.5, math.Log2(float64(xs[len(xs)-1]))+0.5
	px := func(c int) int {
		return x0 + int(math.Round((math.Log2(float64(c))-lo)/(hi-lo)*float64(x1-x0)))
	}
	for _, c := range xs {
		xx := px(c)
		cv.line(xx, y1, xx, y1+6, 1, colInk)
		lbl := strconv.Itoa(c)
		cv.text(xx-textWidth(lbl, fontScale)/2, y1+12, lbl, fontScale, colInk)
	}
	xt := "concurrency (calls in flight, log scale)"
	cv.text((x0+x1-textWidth(xt, fontScale))/2, y1+34, xt, fontScale, colInk)
	cv.line(x0, y0, x0, y1, 2, colInk)
	cv.line(x0, y1, x1, y1, 2, colInk)

	for i, s := range ss {
		c := palette(i)
		for j, p := range s.pts {
			xx, yy := px(p.Concurrency), py(val(p))
			if j > 0 {
				q := s.pts[j-1]
				cv.line(px(q.Concurrency), py(val(q)), xx, yy, 3, c)
			}
			cv.disc(xx, yy, 5, c)
			lbl := valueLabel(val(p))
			cv.text(xx+8, yy-14, lbl, smallScale, c)
		}
	}
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
