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

// A commit that comes after a signal was handled (its temp removed, the
// process ending with the signal's status) waits for that end: it used to
// fail on the missing temp, and the command ended first with status 1 and
// a message about a rename, where the user had pressed Ctrl-C.
func TestCommitWaitsForTheSignalsEnd(t *testing.T) {
	dir := t.TempDir()
	tmp, err := CreateTemp(filepath.Join(dir, "out.json"), WriteOptions{})
	require.NoError(t, err)
	_, err = tmp.File.WriteString("{}")
	require.NoError(t, err)
	waited := false
	saved := awaitDeath
	awaitDeath = func() error { waited = true; return os.ErrProcessDone }
	defer func() { awaitDeath = saved }()
	temps.mu.Lock()
	temps.dying = true
	_ = os.Remove(tmp.File.Name()) // as handle does
	temps.mu.Unlock()
	defer func() { temps.mu.Lock(); temps.dying = false; temps.mu.Unlock() }()
	err = tmp.Commit()
	require.True(t, waited, "the commit did not wait for the signal's end: %v", err)
	require.NoFileExists(t, filepath.Join(dir, "out.json"))
}
