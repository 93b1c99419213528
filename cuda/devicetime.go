package cuda

import (
	"time"

	"github.com/qwenref/qwenref/model"
)

// DeviceTime times one bench op on the device with the library's
// benchmarks: inputs generated and resident there, CUDA events around
// each run after warm-ups, no host copies inside the timed region. It
// covers "conv", "gdn-core" and "gdn-layer" (bf16, the value block 32 the
// model runs) at the 27B's GDN widths, the only shapes those benchmarks
// build, and "attention-layer" at the widths of any shape the
// device-resident model runs (the model's own attention mixer, one layer
// of random weights); ok is false for any other op or shape, and the
// caller keeps its own (host-copy) timing. qwenref bench checks for it on
// a backend's Conv kernel.
func (c Conv) DeviceTime(op string, cfg *model.Config, t int) (median, lo, hi time.Duration, runs int, ok bool, err error) {
	var tm Timing
	switch {
	case op == "attention-layer":
		if residentDims(cfg) != nil {
			return 0, 0, 0, 0, false, nil
		}
		runs = 10
		tm, err = c.Dev.BenchAttentionLayer(cfg, t, runs)
	case !is27BGDN(cfg):
		return 0, 0, 0, 0, false, nil
	case op == "conv":
		tm, err = c.Dev.BenchConv(t)
		runs = 50
	case op == "gdn-core":
		tm, err = c.Dev.BenchGDNCore(t, 32)
		runs = 20
	case op == "gdn-layer":
		if cfg.HiddenSize != 5120 {
			return 0, 0, 0, 0, false, nil
		}
		tm, err = c.Dev.BenchGDNLayer(t, 32)
		runs = 10
	default:
		return 0, 0, 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, 0, 0, false, err
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	return ms(tm.Median), ms(tm.Min), ms(tm.Max), runs, true, nil
}

// is27BGDN reports whether cfg's GDN layers have the widths of the
// library's benchmark shapes (16 key and 48 value heads of 128, conv 4).
func is27BGDN(cfg *model.Config) bool {
	return cfg.LinearNumKeyHeads == 16 && cfg.LinearNumValueHeads == 48 && cfg.LinearKeyHeadDim == 128 &&
		cfg.LinearValueHeadDim == 128 && cfg.LinearConvKernel == 4
}
