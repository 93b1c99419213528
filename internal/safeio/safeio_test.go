//go:build unix

package safeio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dirNames lists a directory, to prove a refused write changed nothing.
func dirNames(t *testing.T, dir string) string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range es {
		n = append(n, e.Name()+":"+e.Type().String())
	}
	return strings.Join(n, ",")
}

func TestOpenRefusesNonRegularWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	done := make(chan error, 1)
	go func() { _, _, err := Open(fifo); done <- err }()
	select {
	case err := <-done:
		var nr *NotRegularError
		if !errors.As(err, &nr) || !strings.Contains(err.Error(), "FIFO") || !strings.Contains(err.Error(), fifo) {
			t.Fatalf("FIFO: got %v, want a NotRegularError naming it", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Open blocked on a FIFO")
	}
	if _, _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("directory: got %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(link); err == nil || !strings.Contains(err.Error(), "FIFO") {
		t.Fatalf("link to FIFO: got %v", err)
	}
	if _, err := ReadCapped(fifo, 10, "config.json"); err == nil {
		t.Fatal("ReadCapped read a FIFO")
	}
}

func TestReadCapped(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	write(t, p, "0123456789")
	if b, err := ReadCapped(p, 10, "x"); err != nil || string(b) != "0123456789" {
		t.Fatalf("at the limit: %q, %v", b, err)
	}
	_, err := ReadCapped(p, 9, "config.json")
	if !IsLimit(err) || !strings.Contains(err.Error(), "config.json") || !strings.Contains(err.Error(), "9 bytes") || !strings.Contains(err.Error(), p) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := ReadAllCapped(strings.NewReader(strings.Repeat("x", 100)), 99, "stream", "tokenizer.json"); !IsLimit(err) {
		t.Fatalf("stream over the limit: %v", err)
	}
}

func TestWriteFileRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	linkFifo := filepath.Join(dir, "link-fifo")
	dangling := filepath.Join(dir, "dangling")
	input := filepath.Join(dir, "weights.safetensors")
	write(t, input, "weights")
	hard := filepath.Join(dir, "hard")
	linkInput := filepath.Join(dir, "link-input")
	loop := filepath.Join(dir, "loop") // loop → loop2 → loop: EvalSymlinks' error wraps nothing
	for _, err := range []error{os.Symlink(fifo, linkFifo), os.Symlink(filepath.Join(dir, "nowhere", "x"), dangling),
		os.Link(input, hard), os.Symlink(input, linkInput), os.Symlink("loop2", loop), os.Symlink("loop", filepath.Join(dir, "loop2"))} {
		if err != nil {
			t.Fatal(err)
		}
	}
	before := dirNames(t, dir)
	opts := WriteOptions{Inputs: []string{input}}
	for _, c := range []struct{ path, want string }{
		{fifo, "FIFO"}, {sub, "directory"}, {linkFifo, "FIFO"}, {dangling, "does not resolve"}, {loop, "does not resolve: EvalSymlinks: too many links"},
		{input, "input"}, {hard, "input"}, {linkInput, "input"},
		{filepath.Join(dir, "missing", "out"), "directory"}, {"/dev/null", "character device"},
	} {
		err := WriteFile(c.path, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, opts)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) || strings.Contains(err.Error(), "%!") {
			t.Errorf("%s: got %v, want an error naming it and %q", c.path, err, c.want)
		}
	}
	if after := dirNames(t, dir); after != before {
		t.Fatalf("a refused write changed the directory:\n%s\n%s", before, after)
	}
	if b, _ := os.ReadFile(input); string(b) != "weights" {
		t.Fatalf("input changed: %q", b)
	}
	st, err := os.Stat("/dev/null")
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("/dev/null is no longer a device: %v %v", st, err)
	}
}

func TestWriteFileReplacesKeepingModeAndLinks(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out")
	write(t, p, "old")
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("out", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	b, _ := os.ReadFile(p)
	if string(b) != "new" || st.Mode().Perm() != 0o600 {
		t.Fatalf("got %q mode %v, want \"new\" mode 0600", b, st.Mode().Perm())
	}
	if l, err := os.Readlink(link); err != nil || l != "out" {
		t.Fatalf("the link was replaced: %q %v", l, err)
	}
	// A failing fill leaves the old content and no temp.
	err := WriteFile(p, func(w io.Writer) error { io.WriteString(w, "partial"); return errors.New("disk full") }, WriteOptions{})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("fill error: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Fatalf("failed write changed the target: %q", b)
	}
	if got := dirNames(t, dir); got != "link:L---------,out:----------" {
		t.Fatalf("left-overs: %s", got)
	}
	if n := LiveTemps(); n != 0 {
		t.Fatalf("%d temps still tracked", n)
	}
	// A new file gets the requested mode.
	q := filepath.Join(dir, "new")
	if err := WriteFile(q, func(w io.Writer) error { return nil }, WriteOptions{Mode: 0o640}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(q); st.Mode().Perm() != 0o640 {
		t.Fatalf("new file mode %v", st.Mode().Perm())
	}
}

// A target whose name is near the 255-byte limit still gets a temp (its
// name repeats only part of the target's), for a file and a directory,
// and a stale temp of it is found again.
func TestWriteFileLongName(t *testing.T) {
	dir := t.TempDir()
	name := strings.Repeat("é", 120) // 240 bytes, cut inside no character
	stale := filepath.Join(dir, "."+tempBase(name)+tempMarker+"999999999-1")
	write(t, stale, "x")
	p := filepath.Join(dir, name)
	if err := WriteFile(p, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "new" {
		t.Fatalf("got %q, %v", b, err)
	}
	if _, err := os.Lstat(stale); err == nil {
		t.Error("the stale temp of the long name was left")
	}
	if !utf8.ValidString(tempBase(name)) || len(tempBase(name)) > maxTempBase {
		t.Errorf("tempBase: %q", tempBase(name))
	}
	tmp, done, err := TempDir(filepath.Join(dir, strings.Repeat("d", 250)))
	if err != nil {
		t.Fatal(err)
	}
	done(false)
	if _, err := os.Lstat(tmp); err == nil {
		t.Error("TempDir's directory was left")
	}
}

func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, ".out"+tempMarker+"999999999-123")
	live := filepath.Join(dir, ".out"+tempMarker+"1-123") // pid 1 is alive
	other := filepath.Join(dir, ".other"+tempMarker+"999999999-1")
	for _, p := range []string{dead, live, other} {
		write(t, p, "x")
	}
	deadDir := filepath.Join(dir, ".out"+tempMarker+"999999998-7")
	if err := os.Mkdir(deadDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(deadDir, "shard"), "x")
	if err := WriteFile(filepath.Join(dir, "out"), func(w io.Writer) error { return nil }, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{dead: false, deadDir: false, live: true, other: true} {
		if _, err := os.Lstat(p); (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}

// A temp's name says which PID namespace and host its pid belongs to: one
// of this process's is removed once its pid is gone; one of another
// container's (a pid this process cannot see) only once untouched for
// StaleAge, however dead its pid looks from here.
func TestRemoveStaleAcrossNamespaces(t *testing.T) {
	dir := t.TempDir()
	name := func(pid, tag string) string { return filepath.Join(dir, ".out"+tempMarker+pid+"."+tag+"-1") }
	oursDead := name("999999999", processTag())
	oursLive := name("1", processTag())
	foreignLive := name("999999999", "0badf00d") // being written in another container
	foreignOld := name("999999998", "0badf00d")
	foreignOldDir := name("999999997", "0badf00d")
	for _, p := range []string{oursDead, oursLive, foreignLive, foreignOld} {
		write(t, p, "x")
	}
	if err := os.Mkdir(foreignOldDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(foreignOldDir, "shard"), "x")
	old := time.Now().Add(-StaleAge - time.Hour)
	for _, p := range []string{foreignOld, foreignOldDir, filepath.Join(foreignOldDir, "shard")} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	RemoveStale(dir, "out")
	for p, want := range map[string]bool{oursDead: false, oursLive: true, foreignLive: true, foreignOld: false, foreignOldDir: false} {
		if _, err := os.Lstat(p); (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", filepath.Base(p), err == nil, want)
		}
	}
	tmp, err := CreateTemp(filepath.Join(dir, "new"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Discard()
	if want := fmt.Sprintf("%s%d.%s-", tempMarker, os.Getpid(), processTag()); !strings.Contains(tmp.Name(), want) {
		t.Errorf("temp %s does not carry %s", tmp.Name(), want)
	}
}

// Credentials never reach a message: a URL's password or token user name,
// a Hugging Face token, an Authorization value a server echoes.
func TestCleanRedactsCredentials(t *testing.T) {
	tok := "hf_" + strings.Repeat("aB3", 12)
	for in, want := range map[string]string{
		"listing at http://user:" + tok + "@mirror:8080/x: refused": "listing at http://user:xxxxx@mirror:8080/x: refused",
		"http://" + tok + "@mirror/api":                             "http://xxxxx@mirror/api",
		"bad token " + tok + " sent":                                "bad token hf_*** sent",
		"echo: Authorization: Bearer s3cr3t-v4lue, please":          "echo: Authorization: Bearer hf_***, please",
		`{"authorization": "Basic dXNlcjpwYXNz"}`:                   `{"authorization": "Basic hf_***"}`,
		"/models/hf_small/config.json":                              "/models/hf_small/config.json",
		"mail admin@example.com":                                    "mail admin@example.com",
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
		if got := Quote(in); strings.Contains(got, tok) || strings.Contains(got, "s3cr3t") || strings.Contains(got, "dXNlcjpwYXNz") {
			t.Errorf("Quote(%q) = %s keeps a credential", in, got)
		}
	}
}

// Text keeps a message's lines and tabs but escapes every other control,
// and cuts nothing.
func TestTextKeepsLines(t *testing.T) {
	long := strings.Repeat("x", 500)
	if got, want := Text("plug-in says:\n\tbad\x1b[2J "+long), "plug-in says:\n\tbad\\x1b[2J "+long; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

func TestQuoteEscapesControls(t *testing.T) {
	for in, want := range map[string]string{
		"layers.0.w":       `"layers.0.w"`,
		"a\x1b[31mred":     `"a\x1b[31mred"`,
		"bidi\u202egnp.sh": `"bidi\u202egnp.sh"`,
		"bad\xffutf8":      `"bad\xffutf8"`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
	if got := Clean("dir/\x1b]0;title\x07x"); got != `dir/\x1b]0;title\ax` {
		t.Errorf("Clean = %s", got)
	}
	if got := Quote(strings.Repeat("é", 300)); !strings.HasSuffix(got, "…(600 bytes in all)") || len(got) > 230 {
		t.Errorf("long name: %s", got)
	}
	if got := List([]string{"a", "b", "c"}, 2); got != "a; b; and 1 more" {
		t.Errorf("List = %q", got)
	}
}

// TestSignalRemovesTemps runs a writer (a temp file and a staging
// directory) in a child process, sends it SIGINT or SIGTERM mid-write and
// checks it died of the signal, leaving nothing.
func TestSignalRemovesTemps(t *testing.T) {
	if os.Getenv("SAFEIO_HELPER_DIR") != "" {
		helperWrite(os.Getenv("SAFEIO_HELPER_DIR"))
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary (not possible under go test -exec emulators)")
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestSignalRemovesTemps$")
		cmd.Env = append(os.Environ(), "SAFEIO_HELPER_DIR="+dir)
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("helper: %q %v", buf, err)
		}
		_ = cmd.Process.Signal(sig)
		err := cmd.Wait()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if err == nil || !ws.Signaled() || ws.Signal() != sig {
			t.Fatalf("%v: child ended with %v (%v), want death by the signal", sig, err, ws)
		}
		if got := dirNames(t, dir); got != "" {
			t.Fatalf("%v left %s", sig, got)
		}
	}
}

// A writer started with SIGHUP and SIGINT ignored (`nohup`, a shell's
// background job) keeps ignoring them: it neither dies nor loses its temps
// on a hangup; SIGTERM still removes them.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	if os.Getenv("SAFEIO_IGNORED_DIR") != "" {
		helperWrite(os.Getenv("SAFEIO_IGNORED_DIR"))
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary (not possible under go test -exec emulators)")
	}
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", `trap '' HUP INT; exec "$0" -test.run='^TestIgnoredSignalsStayIgnored$'`, os.Args[0])
	cmd.Env = append(os.Environ(), "SAFEIO_IGNORED_DIR="+dir)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("helper: %q %v", buf, err)
	}
	_ = cmd.Process.Signal(syscall.SIGHUP)
	_ = cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(300 * time.Millisecond)
	if got := dirNames(t, dir); !strings.Contains(got, tempMarker) {
		t.Errorf("an ignored signal removed the temps: %q left", got)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if err == nil || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("child ended with %v (%v), want death by SIGTERM, not by an ignored signal", err, ws)
	}
	if got := dirNames(t, dir); got != "" {
		t.Fatalf("SIGTERM left %s", got)
	}
}

// TestBrokenStderrRemovesTemps: a writer whose standard error is a pipe
// nobody reads any more (`qwenref … 2>&1 | head`) dies of SIGPIPE at its
// next progress line, leaving nothing; a SIGPIPE that does not come from
// standard output or error (a network peer gone) leaves it running.
func TestBrokenStderrRemovesTemps(t *testing.T) {
	if d := os.Getenv("SAFEIO_PIPE_DIR"); d != "" {
		helperWriteWithProgress(d)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary (not possible under go test -exec emulators)")
	}
	start := func(dir string) (*exec.Cmd, io.ReadCloser, io.ReadCloser) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenStderrRemovesTemps$")
		cmd.Env = append(os.Environ(), "SAFEIO_PIPE_DIR="+dir)
		stdout, _ := cmd.StdoutPipe()
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("helper: %q %v", buf, err)
		}
		return cmd, stdout, stderr
	}
	died := func(cmd *exec.Cmd, want syscall.Signal) {
		err := cmd.Wait()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if err == nil || !ws.Signaled() || ws.Signal() != want {
			t.Fatalf("child ended with %v (%v), want death by %v", err, ws, want)
		}
	}

	dir := t.TempDir()
	cmd, _, stderr := start(dir)
	stderr.Close() // the reader goes away, as head does
	died(cmd, syscall.SIGPIPE)
	if got := dirNames(t, dir); got != "" {
		t.Fatalf("SIGPIPE left %s", got)
	}

	// A SIGPIPE while both streams are fine is not the writer's end.
	dir = t.TempDir()
	cmd, _, stderr = start(dir)
	go io.Copy(io.Discard, stderr)
	_ = cmd.Process.Signal(syscall.SIGPIPE)
	time.Sleep(300 * time.Millisecond)
	if got := dirNames(t, dir); got == "" {
		t.Fatal("a SIGPIPE from elsewhere removed the temps")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	died(cmd, syscall.SIGTERM)
	if got := dirNames(t, dir); got != "" {
		t.Fatalf("SIGTERM left %s", got)
	}
}

// helperWriteWithProgress is helperWrite printing a progress line to
// standard error every 20 ms, as synth and forward do.
func helperWriteWithProgress(dir string) {
	_ = WriteFile(filepath.Join(dir, "out"), func(w io.Writer) error {
		_, _ = w.Write(make([]byte, 1<<20))
		os.Stdout.WriteString("ready\n")
		for range 3000 {
			os.Stderr.WriteString("progress\n")
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}, WriteOptions{})
	os.Exit(0)
}

func helperWrite(dir string) {
	if _, done, err := TempDir(filepath.Join(dir, "ck")); err == nil {
		defer done(false) // never reached: the signal ends the process
	}
	scratch := filepath.Join(dir, "scratch") // a probe's working directory, not an output
	if os.Mkdir(scratch, 0o700) == nil {
		defer TrackTemp(scratch)()
	}
	_ = WriteFile(filepath.Join(dir, "out"), func(w io.Writer) error {
		_, _ = w.Write(make([]byte, 1<<20))
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Minute)
		return nil
	}, WriteOptions{})
	os.Exit(0)
}

// TestTempDirFollowsTheUmask: the staging directory becomes the output, so
// it gets mkdir's mode (0777 less the umask), not a private 0700.
func TestTempDirFollowsTheUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	target := filepath.Join(t.TempDir(), "out")
	dir, done, err := TempDir(target)
	if err != nil {
		t.Fatal(err)
	}
	defer done(false)
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o755 {
		t.Errorf("staging directory mode %o, want 755 under umask 022", got)
	}
	if !strings.HasPrefix(filepath.Base(dir), "."+filepath.Base(target)+tempMarker) {
		t.Errorf("staging directory %s does not carry the temp marker", dir)
	}
}
