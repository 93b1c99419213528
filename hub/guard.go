package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
)

// The defaults of the four limits on a slow or silent server, and the
// environment variables that change them (read by NewClient).
const (
	DefaultHeaderTimeout = 60 * time.Second
	DefaultIdleTimeout   = 2 * time.Minute
	DefaultMinRate       = 1024 // bytes per second
	DefaultRateWindow    = 2 * time.Minute

	EnvHeaderTimeout = "QWENREF_HUB_HEADER_TIMEOUT"
	EnvIdleTimeout   = "QWENREF_HUB_IDLE_TIMEOUT"
	EnvMinRate       = "QWENREF_HUB_MIN_RATE"
	EnvRateWindow    = "QWENREF_HUB_RATE_WINDOW"
)

// StallError reports a server that did not answer in time, stopped
// sending, or sent too slowly; it names the server and the setting that
// bounds the wait.
type StallError struct {
	Host    string // host:port of the server
	Stall   string // what happened, e.g. "sent nothing for 2m0s"
	Setting string // the environment variable(s) that set the limit
}

// Error names the server, the stall and the setting.
func (e *StallError) Error() string {
	return fmt.Sprintf("%s %s (limit set by %s; see docs/hub.md)", e.Host, e.Stall, e.Setting)
}

// timeoutsFromEnv reads the four limits from the environment; a variable
// that is unset or empty keeps the default.
func (c *Client) timeoutsFromEnv() error {
	c.HeaderTimeout, c.IdleTimeout, c.MinRate, c.RateWindow = DefaultHeaderTimeout, DefaultIdleTimeout, DefaultMinRate, DefaultRateWindow
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{EnvHeaderTimeout, &c.HeaderTimeout}, {EnvIdleTimeout, &c.IdleTimeout}, {EnvRateWindow, &c.RateWindow}} {
		v := os.Getenv(d.name)
		if v == "" {
			continue
		}
		t, err := time.ParseDuration(v)
		if err != nil || t < 0 {
			return fmt.Errorf("%s=%q: want a duration such as 90s or 5m (0 turns the limit off)", d.name, v)
		}
		*d.dst = t
	}
	if v := os.Getenv(EnvMinRate); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%s=%q: want bytes per second, a whole number (0 turns the limit off)", EnvMinRate, v)
		}
		c.MinRate = n
	}
	return nil
}

// send issues req on hc, giving up when the response headers have not
// arrived within c.HeaderTimeout (connecting included). The returned
// cancel ends the request; call it once done with the body.
func (c *Client) send(hc *http.Client, req *http.Request) (*http.Response, context.CancelFunc, error) {
	ctx, cancel := context.WithCancel(req.Context())
	req = req.WithContext(ctx)
	var fired atomic.Bool
	var timer *time.Timer
	if c.HeaderTimeout > 0 {
		timer = time.AfterFunc(c.HeaderTimeout, func() { fired.Store(true); cancel() })
	}
	resp, err := hc.Do(req)
	if timer != nil {
		timer.Stop()
	}
	if fired.Load() {
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		host := req.URL.Host
		var ue *url.Error
		if errors.As(err, &ue) {
			if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
				host = u.Host
			}
		}
		return nil, nil, &StallError{Host: host, Stall: fmt.Sprintf("sent no response headers within %v", c.HeaderTimeout), Setting: EnvHeaderTimeout}
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return resp, cancel, nil
}

// bodyGuard reads a response body and cuts it (cancelling the request)
// when nothing arrives for idle, or fewer than minRate bytes per second
// arrive over a window; Read then returns the *StallError.
type bodyGuard struct {
	r       io.ReadCloser
	cancel  context.CancelFunc
	host    string
	idle    time.Duration
	window  time.Duration
	minRate int64

	mu          sync.Mutex
	timer       *time.Timer
	last        time.Time // when the last byte arrived
	windowStart time.Time
	windowBytes int64
	stall       *StallError
	closed      bool
}

// guard wraps resp's body with c's idle and rate limits.
func (c *Client) guard(resp *http.Response, cancel context.CancelFunc) *bodyGuard {
	g := &bodyGuard{r: resp.Body, cancel: cancel, host: resp.Request.URL.Host, idle: c.IdleTimeout, minRate: c.MinRate, window: c.RateWindow}
	if g.minRate <= 0 || g.window <= 0 {
		g.minRate, g.window = 0, 0
	}
	now := time.Now()
	g.last, g.windowStart = now, now
	if next := g.nextCheck(now); next > 0 {
		g.mu.Lock() // check may run before AfterFunc returns
		g.timer = time.AfterFunc(next, g.check)
		g.mu.Unlock()
	}
	return g
}

// windowNeed is the bytes a window must bring.
func (g *bodyGuard) windowNeed() int64 {
	// A product past int64 would convert to a negative count, turning
	// the limit off; capped, it asks for what was set.
	return max(1, safeio.ClampBytes(float64(g.minRate)*g.window.Seconds()))
}

// nextCheck is how long until a limit could next be broken (0: never).
func (g *bodyGuard) nextCheck(now time.Time) time.Duration {
	var next time.Duration
	if g.idle > 0 {
		next = g.last.Add(g.idle).Sub(now)
	}
	if g.window > 0 {
		if w := g.windowStart.Add(g.window).Sub(now); next <= 0 || w < next {
			next = w
		}
	}
	if (g.idle > 0 || g.window > 0) && next <= 0 {
		next = time.Millisecond
	}
	return next
}

// check runs on the timer: it cuts the body if a limit is broken and
// otherwise sets the timer for the next check.
func (g *bodyGuard) check() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.stall != nil {
		return
	}
	now := time.Now()
	switch {
	case g.idle > 0 && now.Sub(g.last) >= g.idle:
		g.stall = &StallError{Host: g.host, Stall: fmt.Sprintf("sent nothing for %v", g.idle), Setting: EnvIdleTimeout}
	case g.window > 0 && now.Sub(g.windowStart) >= g.window:
		if g.windowBytes < g.windowNeed() {
			g.stall = &StallError{Host: g.host, Setting: EnvMinRate + " and " + EnvRateWindow,
				Stall: fmt.Sprintf("sent %d bytes in %v, below the minimum of %s/s", g.windowBytes, g.window, FormatBytes(g.minRate))}
		} else {
			g.windowStart, g.windowBytes = now, 0
		}
	}
	if g.stall != nil {
		g.cancel()
		return
	}
	g.timer.Reset(g.nextCheck(now))
}

// Read reads the body, counting the bytes for the limits.
func (g *bodyGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	g.mu.Lock()
	if n > 0 {
		g.last = time.Now()
		g.windowBytes += int64(n)
	}
	stall := g.stall
	g.mu.Unlock()
	if err != nil && err != io.EOF && stall != nil {
		return n, stall
	}
	return n, err
}

// Close stops the timer, closes the body and ends the request.
func (g *bodyGuard) Close() error {
	g.mu.Lock()
	g.closed = true
	if g.timer != nil {
		g.timer.Stop()
	}
	g.mu.Unlock()
	err := g.r.Close()
	g.cancel()
	return err
}
