package model

import (
	"errors"
	"fmt"
)

// Snapshot is a session's decoding state at one position, kept so that the
// sequence can go back to it (Session.Restore) when what follows changes:
// Gated DeltaNet conv and recurrent states fold every token in and cannot
// be rewound, so they are copied; an attention layer's KV cache only
// grows, so its length is enough.
type Snapshot struct {
	owner *Session
	pos   int
	epoch int         // the owner's epoch and
	taken int         // number of rewinds when taken
	saved []mixerSave // per block
}

// Pos is the number of tokens the snapshot's state has consumed.
func (sn *Snapshot) Pos() int { return sn.pos }

// Bytes is the memory the snapshot holds.
func (sn *Snapshot) Bytes() int64 {
	var n int64
	for _, v := range sn.saved {
		n += v.bytes()
	}
	return n
}

// Snapshot copies the session's state at its current position.
func (s *Session) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := &Snapshot{owner: s, pos: s.Pos(), epoch: s.epoch, taken: len(s.rewinds)}
	for _, st := range s.states {
		sn.saved = append(sn.saved, st.Mixer.save())
	}
	return sn
}

// errStale is Restore's error for a snapshot whose KV rows were
// overwritten: the session went back before it and on since.
var errStale = errors.New("the snapshot is stale: the session was reset or restored to an earlier position after it was taken")

// Restore returns the session to sn, one of its own snapshots; the tokens
// after sn are forgotten. A snapshot the session has gone back behind
// since it was taken (a Reset, or a Restore of an earlier snapshot) is
// refused: its attention rows may have been overwritten.
func (s *Session) Restore(sn *Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sn == nil || sn.owner != s {
		return errors.New("restore: the snapshot is of another session")
	}
	if sn.epoch != s.epoch {
		return errStale
	}
	for _, back := range s.rewinds[sn.taken:] {
		if back < sn.pos {
			return errStale
		}
	}
	if sn.pos > s.Pos() {
		return fmt.Errorf("restore: the snapshot is at token %d, past the session's %d", sn.pos, s.Pos())
	}
	for i, st := range s.states {
		sn.saved[i].restore(st.Mixer)
	}
	s.rewinds = append(s.rewinds, sn.pos)
	s.pos.Store(int64(sn.pos))
	return nil
}

// Rewinder is a Runner of one row that can go back to an earlier state.
// The CPU backends' runners are; a device-resident runner is not.
type Rewinder interface {
	Snapshot() (*Snapshot, error)
	Restore(*Snapshot) error
}

func (r *sessionRunner) Snapshot() (*Snapshot, error) {
	if len(r.rows) != 1 {
		return nil, errors.New("snapshots need a runner of one row")
	}
	return r.rows[0].Snapshot(), nil
}

func (r *sessionRunner) Restore(sn *Snapshot) error {
	if len(r.rows) != 1 {
		return errors.New("snapshots need a runner of one row")
	}
	return r.rows[0].Restore(sn)
}
