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
// of random weights). For those ops at another shape it returns an error
// made by model.UnsupportedShape that says why; for any other op nil,
// nil. It is the "cuda" backend's Device.Time.
func DeviceTime(d *Device, op string, cfg *model.Config, t int) (*model.DeviceTiming, error) {
	var tm Timing
	var err error
	runs := 0
	switch op {
	case "attention-layer":
		if err := SupportsResident(cfg); err != nil {
			return nil, err
		}
		runs = 10
		tm, err = d.BenchAttentionLayer(cfg, t, runs)
	case "conv", "gdn-core", "gdn-layer":
		if !is27BGDN(cfg) || op == "gdn-layer" && cfg.HiddenSize != 5120 {
			return nil, model.UnsupportedShape("the library's %s benchmark builds the 27B's widths only (hidden 5120; GDN 16 key and 48 value heads of 128, conv 4)", op)
		}
		switch op {
		case "conv":
			tm, err = d.BenchConv(t)
			runs = 50
		case "gdn-core":
			tm, err = d.BenchGDNCore(t, 1) // the default scan shape
			runs = 20
		default:
			tm, err = d.BenchGDNLayer(t, 0) // the default scan shape
			runs = 10
		}
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	// The library's benchmarks run the model path's bf16 activations.
	return &model.DeviceTiming{Median: ms(tm.Median), Min: ms(tm.Min), Max: ms(tm.Max), Runs: runs, ElemBytes: 2}, nil
}

// is27BGDN reports whether cfg's GDN layers have the widths of the
// library's benchmark shapes (16 key and 48 value heads of 128, conv 4).
func is27BGDN(cfg *model.Config) bool {
	return cfg.LinearNumKeyHeads == 16 && cfg.LinearNumValueHeads == 48 && cfg.LinearKeyHeadDim == 128 &&
		cfg.LinearValueHeadDim == 128 && cfg.LinearConvKernel == 4
}
