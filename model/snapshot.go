package model

import (
	"errors"
	"fmt"
	"slices"
)

// Snapshot is a session's decoding state at one position, kept so that the
// sequence can go back to it (Session.Restore) when what follows changes:
// Gated DeltaNet conv and recurrent states fold every token in and cannot
// be rewound, so they are copied; an attention layer's KV cache only
// grows, so its length is enough.
type Snapshot struct {
	owner *Session
	pos   int
	epoch int // the owner's epoch and
	taken int // number of rewinds when taken
	gdn   [][2][]float32
	kv    [][2]int // len(K), len(V)
	kvLen []int
}

// Pos is the number of tokens the snapshot's state has consumed.
func (sn *Snapshot) Pos() int { return sn.pos }

// Bytes is the memory the snapshot holds.
func (sn *Snapshot) Bytes() int64 {
	var n int64
	for _, g := range sn.gdn {
		n += 4 * int64(len(g[0])+len(g[1]))
	}
	return n
}

// Snapshot copies the session's state at its current position.
func (s *Session) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := &Snapshot{owner: s, pos: s.Pos(), epoch: s.epoch, taken: len(s.rewinds)}
	for _, st := range s.states {
		switch {
		case st.GDN != nil:
			sn.gdn = append(sn.gdn, [2][]float32{slices.Clone(st.GDN.Conv), slices.Clone(st.GDN.S)})
		case st.KV != nil:
			sn.kv = append(sn.kv, [2]int{len(st.KV.K), len(st.KV.V)})
			sn.kvLen = append(sn.kvLen, st.KV.Len)
		}
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
	gi, ki := 0, 0
	for _, st := range s.states {
		switch {
		case st.GDN != nil:
			copy(st.GDN.Conv, sn.gdn[gi][0])
			copy(st.GDN.S, sn.gdn[gi][1])
			gi++
		case st.KV != nil:
			st.KV.K, st.KV.V, st.KV.Len = st.KV.K[:sn.kv[ki][0]], st.KV.V[:sn.kv[ki][1]], sn.kvLen[ki]
			ki++
		}
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
