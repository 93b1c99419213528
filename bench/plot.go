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
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotSize is the size of every chart.
const plotW, plotH = 16 * vg.Centimeter, 11 * vg.Centimeter

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

// timePlot draws median time against T on log-log axes, a line per
// backend. It returns nil when nothing of op ran.
func timePlot(results []Result, op string) (*plot.Plot, error) {
	backends, _ := backendsOf(results, op)
	if len(backends) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = op + ": median time per call"
	p.X.Label.Text = "sequence length T (tokens)"
	p.Y.Label.Text = "time (ms)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for i, be := range backends {
		var xys plotter.XYs
		for _, r := range results {
			if r.Op == op && r.Backend == be && r.Ran() && r.Median > 0 {
				y := float64(r.Median) / 1e6
				xys = append(xys, plotter.XY{X: float64(r.Seq), Y: y})
				xmin, xmax = math.Min(xmin, float64(r.Seq)), math.Max(xmax, float64(r.Seq))
				ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(be, l, pts)
	}
	// Explicit ranges keep a log axis valid even for a single T.
	p.X.Min, p.X.Max = xmin/1.5, xmax*1.5
	p.Y.Min, p.Y.Max = ymin/2, ymax*2
	return p, nil
}

// penaltyPlot draws each backend's penalty (time over the fastest) as bars
// on a log axis grouped by T; bars start at 1×, the fastest backend.
func penaltyPlot(results []Result, op string) (*plot.Plot, error) {
	backends, seqs := backendsOf(results, op)
	if len(backends) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = op + ": fallback penalty (time / fastest backend's)"
	p.Y.Label.Text = "penalty (×, log scale)"
	p.X.Label.Text = "sequence length T (tokens)"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	names := make([]string, len(seqs))
	for i, t := range seqs {
		names[i] = strconv.Itoa(t)
	}
	p.NominalX(names...)
	w := vg.Length(float64(plotW) * 0.6 / float64(len(seqs)*len(backends)+len(seqs)))
	ymax := 1.0
	for i, be := range backends {
		b := &logBars{width: w, offset: vg.Length(float64(i)-float64(len(backends)-1)/2) * w, color: plotutil.Color(i)}
		var lab plotter.XYLabels
		for j, t := range seqs {
			y := math.NaN()
			for _, r := range results {
				if r.Op == op && r.Backend == be && r.Seq == t && r.Ran() && r.Penalty > 0 {
					y = r.Penalty
				}
			}
			b.xs, b.ys = append(b.xs, float64(j)), append(b.ys, y)
			if !math.IsNaN(y) {
				lab.XYs = append(lab.XYs, plotter.XY{X: float64(j), Y: y})
				lab.Labels = append(lab.Labels, fmt.Sprintf("%.3g×", y))
				ymax = math.Max(ymax, y)
			}
		}
		p.Add(b)
		p.Legend.Add(be, b)
		if len(lab.Labels) > 0 {
			l, err := plotter.NewLabels(lab)
			if err != nil {
				return nil, err
			}
			for k := range l.TextStyle {
				l.TextStyle[k].Font.Size = vg.Points(7)
				l.TextStyle[k].XAlign = draw.XCenter
			}
			l.Offset = vg.Point{X: b.offset, Y: vg.Points(2)}
			p.Add(l)
		}
	}
	p.X.Min, p.X.Max = -0.6, float64(len(seqs))-0.4
	p.Y.Min, p.Y.Max = 0.8, ymax*4 // headroom for the legend
	return p, nil
}

// logBars are bars from y = 1 up (or down) to each value, so they work on
// a log axis where a bar from zero cannot be drawn.
type logBars struct {
	xs, ys []float64
	width  vg.Length
	offset vg.Length
	color  color.Color
}

// Plot implements plot.Plotter.
func (b *logBars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	for i, x := range b.xs {
		y := b.ys[i]
		if math.IsNaN(y) || y <= 0 {
			continue
		}
		cx := trX(x) + b.offset
		y0, y1 := trY(1), trY(y)
		if y0 == y1 {
			y1 = y0 + vg.Points(1) // a hairline marks the fastest backend
		}
		pts := []vg.Point{{X: cx - b.width/2, Y: y0}, {X: cx - b.width/2, Y: y1}, {X: cx + b.width/2, Y: y1}, {X: cx + b.width/2, Y: y0}}
		c.FillPolygon(b.color, c.ClipPolygonY(pts))
	}
}

// DataRange implements plot.DataRanger.
func (b *logBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax, ymin, ymax = math.Inf(1), math.Inf(-1), 1, 1
	for i, x := range b.xs {
		xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
		if y := b.ys[i]; !math.IsNaN(y) && y > 0 {
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
		}
	}
	return xmin, xmax, ymin, ymax
}

// Thumbnail implements plot.Thumbnailer for the legend.
func (b *logBars) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	c.FillPolygon(b.color, []vg.Point{r.Min, {X: r.Min.X, Y: r.Max.Y}, r.Max, {X: r.Max.X, Y: r.Min.Y}})
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
