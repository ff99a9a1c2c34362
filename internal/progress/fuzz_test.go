package progress

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// Seeds live in testdata/fuzz/<Fuzz name>/ (committed); these add the
// table-test lines so a plain `go test` covers them too.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		"isched1 step=450 epoch=3 samples=14400 loss=0.4123 t=1732242000.123456 total=1000 epochs=10 steps_per_epoch=100",
		"isched1 ckpt path=/scratch/run%201/ep%3D3/c%C3%A9.pt step=1000 t=1732242000.5",
		"isched1 resume step=0 path=rel.pt",
		"isched1 step=1 loss=-inf",
		"isched1 step=1 t=1e-300",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := ParseLine(line)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			return
		}
		b, err := appendLine(nil, ev)
		if err != nil {
			// Escaping may grow an accepted path past the limit; nothing else
			// may make a parsed event unformattable.
			if bytes.Contains([]byte(err.Error()), []byte("too long")) {
				return
			}
			t.Fatalf("appendLine(%+v) of accepted %q: %v", ev, line, err)
		}
		back, err := ParseLine(b)
		if err != nil {
			t.Fatalf("ParseLine(%q) (formatted from %q): %v", b, line, err)
		}
		if !equalEvent(ev, back) {
			t.Fatalf("round trip of %q via %q:\n%+v\n%+v", line, b, ev, back)
		}
		b2, err := appendLine(nil, back)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("canonical form not stable: %q then %q (%v)", b, b2, err)
		}
	})
}

// FuzzMatcherFeed feeds data in chunks cut at the positions given by cuts and
// checks that no preset panics, that chunking does not change the events, and
// that isched lines survive a format round trip.
func FuzzMatcherFeed(f *testing.F) {
	f.Add([]byte(" 45%|████▌     | 450/1000 [00:12<00:15, 36.2it/s]\risched1 step=5 loss=nan\n"), []byte{3, 17, 40})
	f.Add([]byte("{'loss': 0.4123, 'learning_rate': 4.5e-05, 'epoch': 0.27}\nEpoch 3:  45%|#| 450/1000 [00:12]\n"), []byte{1})
	f.Add([]byte("Epoch 1/10\n 450/1875 [=====>....] - ETA: 3s - loss: 0.3512\x08\x08\r"), []byte{0, 0, 9})
	at := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		for _, spec := range []string{"tqdm,hf,lightning,keras,isched", `(?P<step>\d+) (?P<epoch>\S+) (?P<loss>\S+)`} {
			whole, err := NewMatcher(spec)
			if err != nil {
				t.Fatal(err)
			}
			want := append(whole.Feed(data, at), whole.Flush(at)...)

			chunked, _ := NewMatcher(spec)
			var got []Event
			rest := data
			for _, c := range cuts {
				n := min(int(c), len(rest))
				got = append(got, chunked.Feed(rest[:n], at)...)
				rest = rest[n:]
			}
			got = append(got, chunked.Feed(rest, at)...)
			got = append(got, chunked.Flush(at)...)

			if len(got) != len(want) {
				t.Fatalf("%s: chunked %d events, whole %d", spec, len(got), len(want))
			}
			for i := range got {
				if !equalEvent(got[i], want[i]) {
					t.Fatalf("%s: event %d chunked %+v, whole %+v", spec, i, got[i], want[i])
				}
				ev := got[i]
				if ev.Kind != KindStep && ev.Kind != KindCkpt && ev.Kind != KindResume {
					t.Fatalf("bad kind %q", ev.Kind)
				}
				if b, err := appendLine(nil, ev); err == nil {
					back, err := ParseLine(b)
					if err != nil || !equalEvent(ev, back) {
						t.Fatalf("event %+v formats as %q, parses as %+v, %v", ev, b, back, err)
					}
				}
			}
			if whole.Stats() != chunked.Stats() {
				t.Fatalf("%s: stats differ: whole %+v, chunked %+v", spec, whole.Stats(), chunked.Stats())
			}
		}
	})
}
