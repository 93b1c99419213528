package safeio

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A writer's temp is created with the handler already listening, under
// its lock: a signal in between used to find no handler (the process died
// by the default action) or an unregistered temp, and the temp stayed.
func TestTempCreatedUnderTheHandler(t *testing.T) {
	if len(handled) == 0 {
		t.Skip("every handled signal was ignored at start")
	}
	listening := false
	untrack, err := trackCreated(func() (string, error) {
		listening = temps.ch != nil
		return filepath.Join(t.TempDir(), "x"), nil
	})
	require.NoError(t, err)
	untrack()
	require.True(t, listening, "the temp was created before the signal handler was installed")
	_, err = trackCreated(func() (string, error) { return "", os.ErrPermission })
	require.Error(t, err)
	require.Zero(t, LiveTemps(), "a failed creation left a temp registered")
}
