package progress

import (
	"strings"
	"testing"
	"time"
)

// want is the part of an Event a matcher test checks.
type want struct {
	step, total, spe int64
	epoch, epochs    int
	loss             *float64
	nonFinite        bool
}

func wantOf(ev Event) want {
	return want{step: ev.Step, total: ev.Total, spe: ev.StepsPerEpoch, epoch: ev.Epoch, epochs: ev.Epochs,
		loss: ev.Loss, nonFinite: ev.NonFinite}
}

func (w want) equal(o want) bool {
	if (w.loss == nil) != (o.loss == nil) || w.loss != nil && *w.loss != *o.loss {
		return false
	}
	w.loss, o.loss = nil, nil
	return w == o
}

// s builds a want with no epoch (the common case for tqdm).
func s(step, total int64) want { return want{step: step, total: total, epoch: NoValue} }

func TestMatcherPresets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec   string
		output string // as the child wrote it, \r and all
		want   []want
	}{
		{"tqdm",
			"  0%|          | 0/1000 [00:00<?, ?it/s]\r 45%|████▌     | 450/1000 [00:12<00:15, 36.2it/s]\r" +
				"100%|██████████| 1000/1000 [00:27<00:00, 36.62it/s]\n",
			[]want{s(0, 1000), s(450, 1000), s(1000, 1000)}},
		{"tqdm", // description, ascii bar, postfix with loss
			"train:  45%|####5     | 450/1000 [00:12<00:15, 36.20it/s, loss=0.123, lr=1e-4]\r",
			[]want{{step: 450, total: 1000, epoch: NoValue, loss: f64(0.123)}}},
		{"tqdm", // unknown total
			"450it [00:12, 36.20it/s]\rtrain: 451it [00:12, 36.20it/s, loss=nan]\n",
			[]want{s(450, 0), {step: 451, epoch: NoValue, nonFinite: true}}},
		{"tqdm", // tqdm.write() of a log line between redraws is not a step
			"epoch 0 done, val acc 0.91\n 10%|█         | 10/100 [00:01<00:09, 9.9it/s]\r",
			[]want{s(10, 100)}},
		{"tqdm", // nested bars with cursor movement
			"\x1b[A\x1b[2K 10%|█         | 10/100 [00:01<00:09, 9.9it/s]\x1b[A\n",
			[]want{s(10, 100)}},
		{"hf",
			"{'loss': 0.4123, 'learning_rate': 4.5e-05, 'epoch': 0.27}\n" +
				"{'loss': 0.3921, 'grad_norm': 1.2345678806304932, 'learning_rate': 4e-05, 'epoch': 1.33}\n" +
				"{'eval_loss': 0.35, 'eval_runtime': 12.3, 'eval_samples_per_second': 81.3, 'epoch': 2.0}\n" +
				"{'loss': nan, 'grad_norm': nan, 'learning_rate': 3e-05, 'epoch': 2.4}\n" +
				"{'loss': '0.3507', 'grad_norm': '0.9821', 'learning_rate': '2.5e-05', 'epoch': '2.66'}\n" +
				"{'train_runtime': 123.4, 'train_samples_per_second': 40.5, 'train_loss': 0.41, 'epoch': 3.0}\n",
			[]want{
				{step: 1, epoch: 0, loss: f64(0.4123)},
				{step: 2, epoch: 1, loss: f64(0.3921)},
				{step: 3, epoch: 2, nonFinite: true},
				{step: 4, epoch: 2, loss: f64(0.3507)},
			}},
		{"hf,tqdm", // HF's own bar on stderr interleaved with its log dicts
			" 50%|█████     | 500/1000 [01:40<01:40,  5.00it/s]\r{'loss': 0.4123, 'learning_rate': 4.5e-05, 'epoch': 0.5}\n" +
				" 50%|█████     | 501/1000 [01:40<01:40,  5.00it/s]\r",
			[]want{s(500, 1000), {step: 1, epoch: 0, loss: f64(0.4123)}, s(501, 1000)}},
		{"lightning",
			"Epoch 0:  45%|████▌     | 450/1000 [00:12<00:15, 36.20it/s, v_num=0]\r" +
				"Epoch 3:  45%|████▌     | 450/1000 [00:12<00:15, 36.20it/s, v_num=0, train_loss=0.123]\r" +
				"Validation DataLoader 0:  50%|█████     | 50/100 [00:01<00:01, 45.00it/s]\r" +
				"Epoch 3: 100%|██████████| 1000/1000 [00:27<00:00, 36.62it/s, loss=0.0971, v_num=1]\n" +
				"Epoch 4: |          | 17/? [00:00<00:00, 36.62it/s]\r",
			[]want{
				{step: 450, spe: 1000, epoch: 0},
				{step: 3450, spe: 1000, epoch: 3, loss: f64(0.123)},
				{step: 4000, spe: 1000, epoch: 3, loss: f64(0.0971)},
				{step: 17, epoch: 4},
			}},
		{"lightning", // RichProgressBar, colours stripped
			"\x1b[37mEpoch 3/9 \x1b[0m \x1b[38;2;98;6;224m━━━━━━━━━━━━\x1b[0m\x1b[38;5;237m╺━━━━━━\x1b[0m 450/1000 \x1b[37m0:00:12 • 0:00:15\x1b[0m \x1b[37m36.20it/s\x1b[0m \x1b[37mv_num: 0 train_loss: 0.123\x1b[0m\n",
			[]want{{step: 3450, total: 10000, spe: 1000, epoch: 3, epochs: 10, loss: f64(0.123)}}},
		{"keras",
			"Epoch 1/10\n" +
				" 450/1875 [======>.......................] - ETA: 3s - loss: 0.3512 - accuracy: 0.8988\x08\x08\x08\x08\r" +
				"1875/1875 [==============================] - 5s 3ms/step - loss: 0.2931 - accuracy: 0.9150 - val_loss: 0.1 - val_accuracy: 0.97\n" +
				"Epoch 2/10\n" +
				"1875/1875 - 5s - loss: 0.1400 - accuracy: 0.9580 - 5s/epoch - 3ms/step\n",
			[]want{
				{step: 450, total: 18750, spe: 1875, epoch: 0, epochs: 10, loss: f64(0.3512)},
				{step: 1875, total: 18750, spe: 1875, epoch: 0, epochs: 10, loss: f64(0.2931)},
				{step: 3750, total: 18750, spe: 1875, epoch: 1, epochs: 10, loss: f64(0.14)},
			}},
		{"keras", // Keras 3
			"Epoch 3/5\n\x1b[1m 450/1875\x1b[0m \x1b[32m━━━━\x1b[0m\x1b[37m━━━━━━━━━━━━━━━━\x1b[0m \x1b[1m3s\x1b[0m 2ms/step - accuracy: 0.8988 - loss: 0.3512\r",
			[]want{{step: 4200, total: 9375, spe: 1875, epoch: 2, epochs: 5, loss: f64(0.3512)}}},
		{"keras", // before any epoch line
			"  10/100 [==>...........................] - ETA: 9s - loss: inf\n",
			[]want{{step: 10, spe: 100, epoch: NoValue, nonFinite: true}}},
		{"isched",
			"isched1 step=5 epoch=1 loss=0.5\n[rank0]: isched1 step=6 total=100\n2024-11-22 10:00:01 INFO train.py:88: isched1 ckpt path=/s/c.pt step=6\n" +
				"see docs/isched1 step=7\nxisched1 step=8\n",
			[]want{{step: 5, epoch: 1, loss: f64(0.5)}, s(6, 100), {step: 6, epoch: NoValue}}},
		{`step (?P<step>\d+)/(?P<total>\d+) .*loss (?P<loss>\S+)(?: epoch (?P<epoch>[\d.]+))?`,
			"step 10/500 | loss 2.31\nstep 20/500 | loss 2.05 epoch 0.4\nvalidation loss 1.9\n",
			[]want{{step: 10, total: 500, epoch: NoValue, loss: f64(2.31)}, {step: 20, total: 500, epoch: 0, loss: f64(2.05)}}},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			t.Parallel()
			m, err := NewMatcher(tt.spec)
			if err != nil {
				t.Fatalf("NewMatcher: %v", err)
			}
			at := time.Unix(1_700_000_000, 0)
			evs := append(m.Feed([]byte(tt.output), at), m.Flush(at)...)
			var got []want
			for _, ev := range evs {
				if ev.Source != SourcePattern || !ev.At.Equal(at) {
					t.Errorf("event Source=%q At=%v", ev.Source, ev.At)
				}
				got = append(got, wantOf(ev))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d events %+v, want %d %+v", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				if !got[i].equal(tt.want[i]) {
					t.Errorf("event %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
			if st := m.Stats(); st.Rejected != 0 {
				t.Errorf("rejected %d lines: %s", st.Rejected, st.LastErr)
			}
			// Any chunking gives the same events.
			for _, size := range []int{1, 2, 3, 7, 64} {
				m2, _ := NewMatcher(tt.spec)
				var again []Event
				for b := []byte(tt.output); len(b) > 0; {
					n := min(size, len(b))
					again = append(again, m2.Feed(b[:n], at)...)
					b = b[n:]
				}
				again = append(again, m2.Flush(at)...)
				if len(again) != len(evs) {
					t.Fatalf("chunks of %d: %d events, want %d", size, len(again), len(evs))
				}
				for i := range again {
					if !wantOf(again[i]).equal(wantOf(evs[i])) {
						t.Errorf("chunks of %d: event %d = %+v, want %+v", size, i, wantOf(again[i]), wantOf(evs[i]))
					}
				}
			}
		})
	}
}

func TestMatcherRejectsBadIschedLines(t *testing.T) {
	t.Parallel()
	m, err := NewMatcher("isched")
	if err != nil {
		t.Fatal(err)
	}
	evs := m.Feed([]byte("isched1 step=1 lss=3\nisched2 step=1\nisched1 step=2\n"), time.Now())
	if len(evs) != 1 || evs[0].Step != 2 {
		t.Errorf("events = %+v, want step 2 only", evs)
	}
	if st := m.Stats(); st.Rejected != 2 || st.Matched != 1 || st.Lines != 3 {
		t.Errorf("stats = %+v", st)
	}
}

func TestMatcherLongLines(t *testing.T) {
	t.Parallel()
	m, err := NewMatcher("isched")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	long := strings.Repeat("a", MaxPatternLine+1)
	var evs []Event
	// A long line split over chunks, a long line in one chunk, then a good one.
	evs = append(evs, m.Feed([]byte(long[:40000]), at)...)
	evs = append(evs, m.Feed([]byte(long[40000:]), at)...)
	evs = append(evs, m.Feed([]byte("isched1 step=9\n"+long+"\nisched1 step=10\n"), at)...)
	// The tail of the first long line is not a line of its own: step 9 is lost
	// with it, 10 is not.
	if len(evs) != 1 || evs[0].Step != 10 {
		t.Errorf("events = %+v, want step 10", evs)
	}
	if st := m.Stats(); st.TooLong != 2 {
		t.Errorf("TooLong = %d, want 2", st.TooLong)
	}
	if cap(m.buf) > 2*MaxPatternLine {
		t.Errorf("buffer cap %d", cap(m.buf))
	}
}

func TestNewMatcherErrors(t *testing.T) {
	t.Parallel()
	for spec, wantMsg := range map[string]string{
		"":                      "empty",
		"(?P<setp>\\d+)":        `"setp"`,
		"loss (?P<loss>\\S+)":   "no (?P<step>",
		"(?P<step>\\d+":         "neither a preset",
		"tqdm,(?P<step>\\d+)x(": "neither a preset",
	} {
		_, err := NewMatcher(spec)
		if err == nil || !strings.Contains(err.Error(), wantMsg) {
			t.Errorf("NewMatcher(%q) = %v, want error containing %q", spec, err, wantMsg)
		}
	}
}

func TestMatcherCustomRejectsBadNumbers(t *testing.T) {
	t.Parallel()
	m, err := NewMatcher(`it (?P<step>\S+) loss (?P<loss>\S+)`)
	if err != nil {
		t.Fatal(err)
	}
	evs := m.Feed([]byte("it x1 loss 0.1\nit 3 loss zz\nit 4 loss 0.2\n"), time.Now())
	if len(evs) != 1 || evs[0].Step != 4 {
		t.Errorf("events = %+v, want step 4", evs)
	}
	if st := m.Stats(); st.Rejected != 2 || !strings.Contains(st.LastErr, "loss") {
		t.Errorf("stats = %+v", st)
	}
}
