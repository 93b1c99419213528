package serve

import (
	"encoding/json"
	"net/http"
)

// eventStream writes server-sent events: "data: JSON" per chunk and
// "data: [DONE]" at the end. Its headers go out with the first chunk,
// so that an error found before (a full queue, a bad prompt) still gets
// its status code. A nil eventStream is no stream.
type eventStream struct {
	w       http.ResponseWriter
	started bool
	err     error
}

func (s *eventStream) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

// send writes one chunk and flushes it; the first write error (the
// client went away) is kept and returned from then on.
func (s *eventStream) send(v any) error {
	if s.err != nil {
		return s.err
	}
	s.start()
	b, err := json.Marshal(v)
	if err != nil {
		s.err = err
		return err
	}
	if _, s.err = s.w.Write(append(append([]byte("data: "), b...), '\n', '\n')); s.err == nil {
		if f, ok := s.w.(http.Flusher); ok {
			f.Flush()
		}
	}
	return s.err
}

func (s *eventStream) done() {
	if s.err == nil {
		s.start()
		_, s.err = s.w.Write([]byte("data: [DONE]\n\n"))
		if f, ok := s.w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// fail reports e: as the response when nothing was streamed yet, else
// as an error event (the status is sent already).
func (s *eventStream) fail(e *apiError) *apiError {
	if s == nil || !s.started {
		return e
	}
	if e.Status != 499 {
		_ = s.send(errorBody(e))
	}
	return nil
}
