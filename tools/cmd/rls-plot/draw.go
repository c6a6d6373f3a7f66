package main

import (
	"image"
	"image/color"
	"image/draw"
)

// canvas is an RGBA image with the few drawing primitives a line plot needs.
type canvas struct {
	img  *image.RGBA
	font font
}

func newCanvas(w, h int, bg color.Color) *canvas {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), &image.Uniform{C: bg}, image.Point{}, draw.Src)
	return &canvas{img: img, font: newFont()}
}

func (cv *canvas) fillRect(x, y, w, h int, c color.Color) {
	r := image.Rect(x, y, x+w, y+h).Intersect(cv.img.Bounds())
	draw.Draw(cv.img, r, &image.Uniform{C: c}, image.Point{}, draw.Src)
}

// line draws a straight line of the given thickness with Bresenham's
// algorithm, stamping a thickness×thickness square at every step.
func (cv *canvas) line(x0, y0, x1, y1, thickness int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	off := thickness / 2
	for {
		cv.fillRect(x0-off, y0-off, thickness, thickness, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

// dashedHLine draws a thin horizontal dashed line (grid).
func (cv *canvas) dashedHLine(x0, x1, y int, c color.Color) {
	for x := x0; x < x1; x += 6 {
		cv.fillRect(x, y, min(3, x1-x), 1, c)
	}
}

// disc draws a filled circle of radius r centred on (cx, cy).
func (cv *canvas) disc(cx, cy, r int, c color.Color) {
	for y := -r; y <= r; y++ {
		for x := -r; x <= r; x++ {
			if x*x+y*y <= r*r {
				cv.img.Set(cx+x, cy+y, c)
			}
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
