package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// screen collects what the terminal shows.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits until the screen holds n copies of sub.
func (s *screen) waitFor(t *testing.T, sub string, n int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Count(s.String(), sub) >= n {
			return
		}
	}
	t.Fatalf("no %d× %q on the terminal:\n%q", n, sub, s.String())
}

// On a terminal (a pseudo-terminal from /dev/ptmx, its other end by
// TIOCGPTPEER): Ctrl-C stops a reply and the chat goes on with its caches,
// the Up arrow recalls the last entry instead of sending "^[[A", a paste
// keeps its newline and its 5,000 characters, Ctrl-D ends with exit 0 on
// a fresh line, and the entries are in the history file.
func TestChatOnTerminal(t *testing.T) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer master.Close()
	require.NoError(t, unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0))
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, master.Fd(), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		t.Skipf("no TIOCGPTPEER: %v", errno)
	}
	fd := int(r)
	tty := os.NewFile(uintptr(fd), "pty")
	defer tty.Close()
	require.NoError(t, unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 100}))

	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "--", "chat", "--chat-template-file", qwen3Tpl)
	cmd.Env = append(os.Environ(), "QWENREF_HOSTILE_CHILD=1", "XDG_STATE_HOME="+state)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	var scr screen
	go func() { _, _ = ioCopy(&scr, master) }()
	send := func(s string) {
		_, err := master.WriteString(s)
		require.NoError(t, err)
	}
	stopReply := func(n int) {
		scr.waitFor(t, "\x1b[?2004l", n) // the entry is sent
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if out := scr.String(); len(out)-strings.LastIndex(out, "\x1b[?2004l") > 40 {
				break // the reply streams
			}
		}
		send("\x03")
		scr.waitFor(t, "chat: stopped; the reply is kept as far as it went", n)
		scr.waitFor(t, " kept · ", n)
	}

	scr.waitFor(t, "> ", 1)
	send("Hello\r")
	stopReply(1)
	send("\x1b[A\r") // the history's last entry, sent again
	stopReply(2)
	send("\x1b[200~" + strings.Repeat("x", 5000) + "\rend\x1b[201~\r")
	stopReply(3)
	send("\x04")
	require.NoError(t, cmd.Wait(), "Ctrl-D ends the chat with exit 0:\n%s", scr.String())

	out := scr.String()
	assert.NotContains(t, out, "^[[A")
	assert.Equal(t, 3, strings.Count(out, " prompt tokens, "), out)
	assert.Equal(t, 1, strings.Count(out, " prompt tokens, 0 kept"), "every turn after the first keeps the caches")
	data, err := os.ReadFile(filepath.Join(state, "qwenref", "chat_history"))
	require.NoError(t, err)
	var hist []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var s string
		require.NoError(t, json.Unmarshal([]byte(l), &s))
		hist = append(hist, s)
	}
	assert.Equal(t, []string{"Hello", strings.Repeat("x", 5000) + "\nend"}, hist)
}

func ioCopy(dst *screen, src *os.File) (int64, error) {
	buf := make([]byte, 4096)
	var n int64
	for {
		k, err := src.Read(buf)
		dst.Write(buf[:k])
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
}

// Main hands commands its stdout wrapped (stdoutWriter): a terminal under
// the wrapper is still one, so chat and run --chat dim the reasoning there.
func TestIsTerminalSeesThroughStdout(t *testing.T) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer master.Close()
	assert.True(t, isTerminal(&stdoutWriter{w: master}))
	assert.False(t, isTerminal(&stdoutWriter{w: &bytes.Buffer{}}))
}
