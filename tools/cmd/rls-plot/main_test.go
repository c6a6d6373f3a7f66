package main

import (
	"bytes"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `{"label":"floor","addr":"127.0.0.1:1","concurrency":64,"rps":28000,"p99_ms":7}
{"label":"floor","addr":"127.0.0.1:1","concurrency":16,"rps":20000,"p99_ms":2}

{"label":"floor","addr":"127.0.0.1:1","concurrency":64,"rps":30000,"p99_ms":9}
{"label":"","addr":"127.0.0.1:2","concurrency":16,"rps":5000,"p99_ms":11}
`

func TestReadAndGroup(t *testing.T) {
	pts, err := readPoints(strings.NewReader(sample), "sample")
	if err != nil {
		t.Fatal(err)
	}
	ss := group(pts)
	if len(ss) != 2 || ss[0].label != "floor" || ss[1].label != "127.0.0.1:2" {
		t.Fatalf("series: %+v", ss)
	}
	f := ss[0].pts
	if len(f) != 2 || f[0].Concurrency != 16 || f[1].Concurrency != 64 {
		t.Fatalf("floor points not sorted and merged: %+v", f)
	}
	if f[1].RPS != 29000 || f[1].P99Ms != 8 {
		t.Fatalf("repeated runs not averaged: %+v", f[1])
	}
}

func TestReadPointsErrors(t *testing.T) {
	for _, in := range []string{"{not json}\n", `{"label":"x","concurrency":0}` + "\n"} {
		if _, err := readPoints(strings.NewReader(in), "bad"); err == nil || !strings.HasPrefix(err.Error(), "bad:1:") {
			t.Errorf("readPoints(%q) = %v, want an error naming bad:1", in, err)
		}
	}
}

func TestNiceScale(t *testing.T) {
	tests := []struct{ max, step, top float64 }{
		{28000, 10000, 30000},
		{30500, 10000, 40000},
		{7.3, 2, 8},
		{48, 10, 60},
		{0.42, 0.1, 0.5},
		{0, 1, 1},
	}
	for _, tc := range tests {
		step, top := niceScale(tc.max)
		if step != tc.step || top != tc.top {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", tc.max, step, top, tc.step, tc.top)
		}
	}
	for _, tc := range []struct {
		v, step float64
		want    string
	}{{0, 10000, "0"}, {20000, 10000, "20K"}, {2500, 500, "2500"}, {6, 2, "6"}, {0.3, 0.1, "0.3"}} {
		if got := tickLabel(tc.v, tc.step); got != tc.want {
			t.Errorf("tickLabel(%v, %v) = %q, want %q", tc.v, tc.step, got, tc.want)
		}
	}
}

func TestRunWritesPNGWithSeriesColours(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "r.jsonl")
	out := filepath.Join(dir, "r.png")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-o", out, "-title", "test", in}, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != imgW || img.Bounds().Dy() != imgH {
		t.Fatalf("size %v", img.Bounds())
	}
	// Both series' colours appear (lines, markers, legend).
	for i := range 2 {
		want := palette(i)
		found := false
		for y := 0; y < imgH && !found; y++ {
			for x := 0; x < imgW && !found; x++ {
				r, g, b, _ := img.At(x, y).RGBA()
				found = uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(b>>8) == want.B
			}
		}
		if !found {
			t.Errorf("series %d colour %v not drawn", i, want)
		}
	}
	if err := run([]string{in}, io.Discard); err == nil {
		t.Error("missing -o: want error")
	}
	// One series with one point still draws (the log axis is padded).
	one := filepath.Join(dir, "one.jsonl")
	if err := os.WriteFile(one, []byte(`{"label":"x","concurrency":64,"rps":1000,"p99_ms":3}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-o", filepath.Join(dir, "one.png"), one}, io.Discard); err != nil {
		t.Fatalf("one point: %v", err)
	}
}
