package coordinator

import (
	"errors"
	"slices"
	"testing"

	"github.com/isched/isched/internal/stream"
)

func TestPipelineReadAhead(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	want := []stream.Entry{{ID: "1-0"}, {ID: "1-1"}}
	p.readAhead(func() ([]stream.Entry, error) { return want, nil })
	if p.reading == nil {
		t.Fatal("no read under way after readAhead")
	}
	got, err := p.readDone()
	if err != nil || !slices.EqualFunc(got, want, func(a, b stream.Entry) bool { return a.ID == b.ID }) {
		t.Errorf("readDone = %v, %v; want %v", got, err, want)
	}
	if p.reading != nil {
		t.Error("a read still under way after readDone")
	}
}

func TestPipelineWriteBehind(t *testing.T) {
	t.Parallel()
	fail := errors.New("write failed")
	tests := []struct {
		name    string
		queued  int // keys set in the batch
		err     error
		wrote   bool
		wantErr error
	}{
		{"nothing queued: no write", 0, nil, false, nil},
		{"written", 2, nil, true, nil},
		{"failed", 1, fail, true, fail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			for i := range tt.queued {
				p.batch.Set("k"+string(rune('a'+i)), []byte("v"), 0)
			}
			wrote := 0
			p.writeBehind(func(b *stream.Batch) error {
				wrote = b.Len()
				b.Reset()
				return tt.err
			})
			if p.batch.Len() != 0 {
				t.Errorf("%d writes still queued after writeBehind, want a fresh batch", p.batch.Len())
			}
			if err := p.settle(); !errors.Is(err, tt.wantErr) {
				t.Errorf("settle = %v, want %v", err, tt.wantErr)
			}
			if (wrote > 0) != tt.wrote || tt.wrote && wrote != tt.queued {
				t.Errorf("wrote %d queued writes, want %d (written: %v)", wrote, tt.queued, tt.wrote)
			}
			if p.inflight != nil {
				t.Error("a write still in flight after settle")
			}
		})
	}
}

func TestPipelineSettleOrDrop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		err        error
		wantQueued int
	}{
		{"the write landed: the queue is kept", nil, 1},
		{"the write failed: the queue is dropped", errors.New("write failed"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			p.batch.Set("a", []byte("v"), 0)
			p.writeBehind(func(b *stream.Batch) error { b.Reset(); return tt.err })
			p.batch.Set("b", []byte("v"), 0)
			if err := p.settleOrDrop(); !errors.Is(err, tt.err) {
				t.Errorf("settleOrDrop = %v, want %v", err, tt.err)
			}
			if n := p.batch.Len(); n != tt.wantQueued {
				t.Errorf("%d writes queued, want %d", n, tt.wantQueued)
			}
		})
	}
}

func TestPipelineDrop(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	p.batch.Set("a", []byte("v"), 0)
	p.dirtySessions["s1"] = &session{}
	p.touched["l1"] = &lineage{}
	p.receipts = [][]byte{[]byte("r")}
	p.readAhead(func() ([]stream.Entry, error) { return []stream.Entry{{ID: "1-0"}}, nil })
	p.drop()
	if p.reading != nil || p.inflight != nil || p.batch.Len() != 0 || len(p.dirtySessions) != 0 || len(p.touched) != 0 {
		t.Errorf("after drop: reading %v, inflight %v, %d queued, %d dirty sessions, %d touched; want none",
			p.reading != nil, p.inflight != nil, p.batch.Len(), len(p.dirtySessions), len(p.touched))
	}
	if len(p.receipts) != 1 {
		t.Errorf("%d receipts after drop, want the 1 queued (the next flush pushes it)", len(p.receipts))
	}
}
