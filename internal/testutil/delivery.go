package testutil

import (
	"fmt"
	"testing"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// Sent is one report as a test found it in the ingest stream: its session,
// its sequence number and its bytes on the wire (payload and MAC).
type Sent struct {
	SID  string
	Seq  uint64
	Wire string
}

// FirstCopies checks what wrappers promise the ingest stream: every
// session's reports at least once and in order. The first copies of a
// session's sequence numbers are 1..N in stream order; a report may follow
// itself (its XADD was applied but the reply was lost, so the wrapper sent
// it again) as a byte-identical copy right after the original in that
// session's order — what the coordinator drops as a duplicate. Anything
// else (a gap, an older number, other bytes under a number) is an error.
// It returns the indices of the first copies and the number of copies.
func FirstCopies(ents []Sent) (first []int, copies int, err error) {
	type last struct {
		seq  uint64
		wire string
	}
	seen := map[string]last{}
	for i, e := range ents {
		l := seen[e.SID]
		switch {
		case e.Seq == l.seq+1:
			seen[e.SID] = last{e.Seq, e.Wire}
			first = append(first, i)
		case e.Seq == l.seq && e.Seq > 0 && e.Wire == l.wire:
			copies++
		case e.Seq == l.seq && e.Seq > 0:
			return first, copies, fmt.Errorf("entry %d: session %s seq %d sent again with other bytes", i, e.SID, e.Seq)
		default:
			return first, copies, fmt.Errorf("entry %d: session %s seq %d after %d: lost, repeated or reordered", i, e.SID, e.Seq, l.seq)
		}
	}
	return first, copies, nil
}

// Delivery is an ingest stream as tests read it: every entry decoded, the
// indices of the first copies and the number of retransmitted copies.
type Delivery struct {
	Envs   []*report.Envelope // one per entry, in stream order
	First  []int              // indices of the first copies
	Copies int
}

// Delivered decodes every entry of an ingest stream and checks the
// at-least-once, in-order promise with FirstCopies; it fails t otherwise.
// Credentials and MACs are the caller's to check (MUNGE opens a
// credential once).
func Delivered(t testing.TB, ents []stream.Entry) Delivery {
	t.Helper()
	d := Delivery{Envs: make([]*report.Envelope, len(ents))}
	sent := make([]Sent, len(ents))
	for i, e := range ents {
		env, err := report.Decode(e.Payload)
		if err != nil {
			t.Fatalf("ingest entry %d does not decode: %v", i, err)
		}
		d.Envs[i] = env
		sent[i] = Sent{SID: env.SID, Seq: env.Seq, Wire: string(e.Payload) + "\x00" + e.MAC}
	}
	var err error
	if d.First, d.Copies, err = FirstCopies(sent); err != nil {
		t.Fatal(err)
	}
	if d.Copies > 0 {
		t.Logf("%d reports in the stream twice (sent again after a lost reply)", d.Copies)
	}
	return d
}
