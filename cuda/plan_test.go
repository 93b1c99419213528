package cuda

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
)

// enumNames reads the enumerators of the C enum in header that starts with
// first, in order, up to (not including) the one named stop.
func enumNames(t *testing.T, header, first, stop string) []string {
	t.Helper()
	i := strings.Index(header, first)
	require.GreaterOrEqual(t, i, 0, "%s not in the header", first)
	j := strings.Index(header[i:], stop)
	require.Greater(t, j, 0, "%s not after %s", stop, first)
	body := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(header[i:i+j], "")
	return regexp.MustCompile(`QR_[A-Z0-9_]+`).FindAllString(body, -1)
}

// The plan's ops and the record slots are the library's: model.PlanOp
// values are the QR_OP_* of csrc/qwenref_cuda.h in order, stepRecords is
// QR_STEP_RECORDS, MoEDecodeShapes and GEMVShapes QR_MOE_DECODE_SHAPES and
// QR_GEMV_SHAPES, and the ABI version is the header's.
func TestPlanOpsMatchHeader(t *testing.T) {
	raw, err := os.ReadFile("csrc/qwenref_cuda.h")
	require.NoError(t, err)
	h := string(raw)
	ops := enumNames(t, h, "QR_OP_EMBED = 0", "QR_OP_COUNT")
	require.Len(t, ops, int(model.OpLMHead)+1)
	for i, name := range ops {
		assert.Equal(t, "QR_OP_"+strings.ToUpper(model.PlanOp(i).String()), name, "op %d", i)
	}
	m := regexp.MustCompile(`#define QR_STEP_RECORDS (\d+)`).FindStringSubmatch(h)
	require.NotNil(t, m)
	assert.Equal(t, m[1], strconv.Itoa(stepRecords))
	m = regexp.MustCompile(`#define QR_MOE_DECODE_SHAPES (\d+)`).FindStringSubmatch(h)
	require.NotNil(t, m)
	assert.Equal(t, m[1], strconv.Itoa(MoEDecodeShapes))
	m = regexp.MustCompile(`#define QR_GEMV_SHAPES (\d+)`).FindStringSubmatch(h)
	require.NotNil(t, m)
	assert.Equal(t, m[1], strconv.Itoa(GEMVShapes))
	m = regexp.MustCompile(`#define QR_ABI_VERSION (\d+)`).FindStringSubmatch(h)
	require.NotNil(t, m)
	assert.Equal(t, m[1], strconv.Itoa(abiVersion))
	slots := enumNames(t, h, "QR_W_EMBED = 0", "};")
	for i, want := range map[int]string{wFinalNorm: "QR_W_FINAL_NORM", wInputNorm: "QR_W_INPUT_NORM", wPostNorm: "QR_W_POST_NORM"} {
		assert.Equal(t, want, slots[i])
	}
}

// cPlan packs every step's stage names where its offsets say, NUL
// terminated, unused slots -1, and the norms' weights as QR_W_ slots.
func TestCPlanPacksNames(t *testing.T) {
	for _, shape := range []string{"tiny", "35b-a3b", "80b-a3b"} {
		cfg, err := model.ShapeConfig(shape)
		require.NoError(t, err, shape)
		plan, err := model.Plan(cfg)
		require.NoError(t, err, shape)
		steps, names, err := cPlan(cfg)
		require.NoError(t, err, shape)
		require.Len(t, steps, len(plan))
		for i, s := range steps {
			p := plan[i]
			assert.Equal(t, int32(p.Op), s.op)
			assert.Equal(t, int32(p.Layer), s.layer)
			for r, off := range s.rec {
				if r >= len(p.Stages) {
					assert.Equal(t, int32(-1), off, "%s step %d slot %d", shape, i, r)
					continue
				}
				end := bytes.IndexByte(names[off:], 0)
				require.GreaterOrEqual(t, end, 0)
				assert.Equal(t, p.Stages[r], string(names[off:int(off)+end]))
			}
			if p.Op == model.OpNorm {
				want := map[int]int32{-1: wFinalNorm}[p.Layer]
				if p.Layer >= 0 {
					want = map[model.NormWeight]int32{model.NormInput: wInputNorm, model.NormPost: wPostNorm}[p.Norm]
				}
				assert.Equal(t, want, s.arg, "%s step %d", shape, i)
			}
		}
	}
}
