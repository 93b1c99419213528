package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotSize is the size of every chart.
const plotW, plotH = 18 * vg.Centimeter, 12 * vg.Centimeter

// okabeIto is the Okabe–Ito palette (distinct under the common colour
// vision deficiencies), in the order backends take it.
var okabeIto = []color.RGBA{
	{0x00, 0x72, 0xB2, 0xff}, // blue
	{0xE6, 0x9F, 0x00, 0xff}, // orange
	{0x00, 0x9E, 0x73, 0xff}, // bluish green
	{0xD5, 0x5E, 0x00, 0xff}, // vermillion
	{0xCC, 0x79, 0xA7, 0xff}, // reddish purple
	{0x56, 0xB4, 0xE9, 0xff}, // sky blue
	{0xF0, 0xE4, 0x42, 0xff}, // yellow
	{0x00, 0x00, 0x00, 0xff}, // black
}

// shapes pair with the colours, so print and legend survive without colour.
var shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PlusGlyph{},
	draw.CrossGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}}

func styleOf(i int) (color.Color, draw.GlyphDrawer) {
	return okabeIto[i%len(okabeIto)], shapes[i%len(shapes)]
}

// backendsOf lists the backends with a timed result for op, in order of
// first appearance, and the sequence lengths run.
func backendsOf(results []Result, op string) (backends []string, seqs []int) {
	for _, r := range results {
		if r.Op != op {
			continue
		}
		if r.Ran() && !slices.Contains(backends, r.Backend) {
			backends = append(backends, r.Backend)
		}
		if !slices.Contains(seqs, r.Seq) {
			seqs = append(seqs, r.Seq)
		}
	}
	slices.Sort(seqs)
	return backends, seqs
}

// seqTicks puts a labelled tick at every measured T and nowhere else.
type seqTicks []int

// Ticks implements plot.Ticker.
func (s seqTicks) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	for _, v := range s {
		t = append(t, plot.Tick{Value: float64(v), Label: strconv.Itoa(v)})
	}
	return t
}

// steps125Ticks labels a log axis at 1, 2 and 5 times each power of ten
// (suffix appended), so every decade has readable values.
type steps125Ticks struct{ suffix string }

// Ticks implements plot.Ticker.
func (s steps125Ticks) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	if min <= 0 || max <= min {
		return t
	}
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= min && v <= max {
				t = append(t, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64) + s.suffix})
			}
		}
	}
	if len(t) < 2 { // a narrow range: label its ends
		t = append(t, plot.Tick{Value: min, Label: fmt.Sprintf("%.3g%s", min, s.suffix)},
			plot.Tick{Value: max, Label: fmt.Sprintf("%.3g%s", max, s.suffix)})
	}
	return t
}

// linearTicks labels a linear axis at a 1, 2 or 5 × 10^k step giving
// four to ten ticks, with a suffix.
type linearTicks struct{ suffix string }

// Ticks implements plot.Ticker.
func (l linearTicks) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	if !(max > min) {
		return t
	}
	step := math.Pow(10, math.Floor(math.Log10(max-min)))
	for _, m := range []float64{0.1, 0.2, 0.5, 1} {
		if (max-min)/(step*m) <= 10 {
			step *= m
			break
		}
	}
	for v := math.Ceil(min/step) * step; v <= max+step*1e-9; v += step {
		t = append(t, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 4, 64) + l.suffix})
	}
	return t
}

// caption puts the run's shape, build and machine under the x axis label.
func caption(p *plot.Plot, label string, meta Meta) {
	p.X.Label.Text = label + "\n" + meta.Caption()
	p.X.Label.TextStyle.Font.Size = vg.Points(8)
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), -vg.Points(4)
	p.Legend.TextStyle.Font.Size = vg.Points(9)
}

// timePlot draws median time against T on log-log axes, a line per
// backend, with min–max whiskers. It returns nil when nothing of op ran.
func timePlot(meta Meta, results []Result, op string) (*plot.Plot, error) {
	backends, seqs := backendsOf(results, op)
	if len(backends) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = op + ": median time per call (whiskers: min – max)"
	caption(p, "sequence length T (tokens)", meta)
	p.Y.Label.Text = "time (ms, log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = seqTicks(seqs), steps125Ticks{}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for i, be := range backends {
		var pts whiskered
		for _, r := range results {
			if r.Op == op && r.Backend == be && r.Ran() && r.Median > 0 {
				lo, mid, hi := float64(r.Min)/1e6, float64(r.Median)/1e6, float64(r.Max)/1e6
				pts.XYs = append(pts.XYs, plotter.XY{X: float64(r.Seq), Y: mid})
				pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{mid - lo, hi - mid})
				xmin, xmax = math.Min(xmin, float64(r.Seq)), math.Max(xmax, float64(r.Seq))
				ymin, ymax = math.Min(ymin, math.Max(lo, mid/100)), math.Max(ymax, hi)
			}
		}
		if len(pts.XYs) == 0 {
			continue
		}
		if err := addSeries(p, be, i, pts, 0); err != nil {
			return nil, err
		}
	}
	// Explicit ranges keep a log axis valid even for a single T.
	p.X.Min, p.X.Max = xmin/1.3, xmax*1.3
	p.Y.Min, p.Y.Max = ymin/1.5, ymax*3 // headroom for the legend
	return p, nil
}

// penaltyPlot is a dot plot of each backend's penalty (its time over the
// fastest backend's median) at each T, with whiskers from its min to max
// time over that same median and a line at 1× (the fastest). The axis is
// linear while the largest penalty is at most 20×, else logarithmic with
// labels at 1, 2, 5, 10, …
func penaltyPlot(meta Meta, results []Result, op string) (*plot.Plot, error) {
	backends, seqs := backendsOf(results, op)
	if len(backends) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = op + ": fallback penalty (time / fastest median; whiskers: min – max)"
	caption(p, "sequence length T (tokens)", meta)
	p.Legend.Top, p.Legend.Left = true, true
	names := make([]string, len(seqs))
	for i, t := range seqs {
		names[i] = strconv.Itoa(t)
	}
	p.NominalX(names...)
	p.Add(plotter.NewGrid())
	ymax, ymin := 1.0, 1.0
	var all []struct {
		pts whiskered
		i   int
		be  string
	}
	for i, be := range backends {
		var pts whiskered
		for j, t := range seqs {
			for _, r := range results {
				if r.Op != op || r.Backend != be || r.Seq != t || !r.Ran() || !(r.Penalty > 0) {
					continue
				}
				fastest := float64(r.Median) / r.Penalty
				lo, hi := float64(r.Min)/fastest, float64(r.Max)/fastest
				pts.XYs = append(pts.XYs, plotter.XY{X: float64(j), Y: r.Penalty})
				pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{r.Penalty - lo, hi - r.Penalty})
				pts.labels = append(pts.labels, fmt.Sprintf("%.3g×", r.Penalty))
				ymax, ymin = math.Max(ymax, hi), math.Min(ymin, lo)
			}
		}
		all = append(all, struct {
			pts whiskered
			i   int
			be  string
		}{pts, i, be})
	}
	logAxis := ymax > 20
	if logAxis {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, steps125Ticks{suffix: "×"}
		p.Y.Label.Text = "penalty (×, log scale)"
		p.Y.Min, p.Y.Max = math.Min(0.8, ymin/1.2), ymax*4
	} else {
		p.Y.Label.Text = "penalty (×)"
		p.Y.Tick.Marker = linearTicks{suffix: "×"}
		p.Y.Min, p.Y.Max = 0, ymax*1.35
	}
	one, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 1}, {X: float64(len(seqs)) - 0.5, Y: 1}})
	if err != nil {
		return nil, err
	}
	one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	one.Color = color.Gray{Y: 0x60}
	p.Add(one)
	// Backends sit side by side within a T, 0.7 of a slot wide in all.
	spread := 0.7 / float64(len(backends))
	for _, s := range all {
		if len(s.pts.XYs) == 0 {
			continue
		}
		off := (float64(s.i) - float64(len(backends)-1)/2) * spread
		if err := addSeries(p, s.be, s.i, s.pts, off); err != nil {
			return nil, err
		}
	}
	p.X.Min, p.X.Max = -0.5, float64(len(seqs))-0.5
	return p, nil
}

// whiskered is a series of points with asymmetric y errors and optional
// value labels.
type whiskered struct {
	plotter.XYs
	plotter.YErrors
	labels []string
}

// addSeries draws one backend: points, min–max whiskers, a line (time
// plots, offset 0) and value labels (penalty plots), shifted by off on x.
func addSeries(p *plot.Plot, name string, i int, s whiskered, off float64) error {
	c, glyph := styleOf(i)
	xys := make(plotter.XYs, len(s.XYs))
	for k, xy := range s.XYs {
		xys[k] = plotter.XY{X: xy.X + off, Y: xy.Y}
	}
	sc, err := plotter.NewScatter(xys)
	if err != nil {
		return err
	}
	sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = c, glyph, vg.Points(3.5)
	eb, err := plotter.NewYErrorBars(struct {
		plotter.XYer
		plotter.YErrorer
	}{xys, s.YErrors})
	if err != nil {
		return err
	}
	eb.LineStyle.Color, eb.LineStyle.Width, eb.CapWidth = c, vg.Points(1.2), vg.Points(5)
	p.Add(eb, sc)
	if s.labels == nil {
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color, l.Width = c, vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(name, l, sc)
		return nil
	}
	p.Legend.Add(name, sc)
	lab, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: s.labels})
	if err != nil {
		return err
	}
	for k := range lab.TextStyle {
		lab.TextStyle[k].Font.Size = vg.Points(7)
		lab.TextStyle[k].XAlign = draw.XLeft
		lab.TextStyle[k].Color = color.Gray{Y: 0x20}
	}
	lab.Offset = vg.Point{X: vg.Points(5), Y: vg.Points(-3)}
	p.Add(lab)
	return nil
}

// renderPlot writes p in format ("svg" or "png").
func renderPlot(p *plot.Plot, format string, w io.Writer) error {
	wt, err := p.WriterTo(plotW, plotH, format)
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}
