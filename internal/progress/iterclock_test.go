package progress

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func stepAt(step int64, at time.Duration) Event {
	return Event{Kind: KindStep, Step: step, Epoch: NoValue, At: t0.Add(at)}
}

func stepLoop(step int64, at time.Duration, loop float64) Event {
	ev := stepAt(step, at)
	ev.LoopTime = loop
	return ev
}

func TestIterClock(t *testing.T) {
	t.Parallel()
	sec := time.Second
	ms := time.Millisecond
	ckpt := Event{Kind: KindCkpt, Step: NoValue, Epoch: NoValue, Path: "/c"}
	tests := []struct {
		name    string
		batches [][]Event
		want    []Iter // At omitted: checked to be the closing event's
	}{
		{"first batch is only a baseline",
			[][]Event{{stepAt(1, 0)}},
			nil},
		{"one step per batch",
			[][]Event{{stepAt(1, 0)}, {stepAt(2, sec)}, {stepAt(3, 3*sec)}},
			[]Iter{{Step: 2, Steps: 1, PerStep: sec, By: ByWrapper}, {Step: 3, Steps: 1, PerStep: 2 * sec, By: ByWrapper}}},
		{"steps jump: divide by the delta",
			[][]Event{{stepAt(100, 0)}, {stepAt(150, 10*sec)}},
			[]Iter{{Step: 150, Steps: 50, PerStep: 200 * ms, By: ByWrapper}}},
		{"a batch counts from its last step",
			[][]Event{{stepAt(1, 0), stepAt(5, 0)}, {stepAt(6, 2*sec), stepAt(7, 2*sec), stepAt(10, 2*sec)}},
			[]Iter{{Step: 10, Steps: 5, PerStep: 400 * ms, By: ByWrapper}}},
		{"a batch split over calls is merged",
			[][]Event{{stepAt(1, 0)}, {stepAt(5, 0)}, {stepAt(10, sec)}},
			[]Iter{{Step: 10, Steps: 5, PerStep: 200 * ms, By: ByWrapper}}},
		{"repeated step keeps the first sighting",
			[][]Event{{stepAt(1, 0)}, {stepAt(1, sec)}, {stepAt(2, 2*sec)}},
			[]Iter{{Step: 2, Steps: 1, PerStep: 2 * sec, By: ByWrapper}}},
		{"step going back is a reset",
			[][]Event{{stepAt(900, 0)}, {stepAt(1000, sec), stepAt(0, sec), stepAt(3, sec)}, {stepAt(13, 2*sec)}},
			[]Iter{{Step: 13, Steps: 10, PerStep: 100 * ms, By: ByWrapper}}},
		{"resume is a reset",
			[][]Event{{stepAt(10, 0)}, {{Kind: KindResume, Step: 5, Epoch: NoValue}, stepAt(6, sec)}, {stepAt(8, 2*sec)}},
			[]Iter{{Step: 8, Steps: 2, PerStep: 500 * ms, By: ByWrapper}}},
		{"loop clock: every pair with t=",
			[][]Event{{stepLoop(1, 0, 1000.0), stepLoop(2, 0, 1000.25), stepLoop(4, 0, 1001.25)}, {stepLoop(5, sec, 1001.5)}},
			[]Iter{
				{Step: 2, Steps: 1, PerStep: 250 * ms, By: ByLoop},
				{Step: 4, Steps: 2, PerStep: 500 * ms, By: ByLoop},
				{Step: 5, Steps: 1, PerStep: 250 * ms, By: ByLoop},
				{Step: 5, Steps: 1, PerStep: sec, By: ByWrapper},
			}},
		{"loop clock going back is a reset",
			[][]Event{{stepLoop(1, 0, 1000)}, {stepLoop(2, sec, 900)}, {stepLoop(3, 2*sec, 901)}},
			[]Iter{
				{Step: 2, Steps: 1, PerStep: sec, By: ByWrapper},
				{Step: 3, Steps: 1, PerStep: sec, By: ByLoop},
				{Step: 3, Steps: 1, PerStep: sec, By: ByWrapper},
			}},
		{"checkpoint inside an interval is flagged, once",
			[][]Event{{stepLoop(1, 0, 10)}, {ckpt}, {stepLoop(2, 5*sec, 15)}, {stepLoop(3, 6*sec, 16)}},
			[]Iter{
				{Step: 2, Steps: 1, PerStep: 5 * sec, By: ByLoop, AfterCkpt: true},
				{Step: 2, Steps: 1, PerStep: 5 * sec, By: ByWrapper, AfterCkpt: true},
				{Step: 3, Steps: 1, PerStep: sec, By: ByLoop},
				{Step: 3, Steps: 1, PerStep: sec, By: ByWrapper},
			}},
		{"checkpoint after the last step of a batch flags the next interval",
			[][]Event{{stepAt(1, 0)}, {stepAt(2, sec), ckpt}, {stepAt(3, 5*sec)}},
			[]Iter{
				{Step: 2, Steps: 1, PerStep: sec, By: ByWrapper},
				{Step: 3, Steps: 1, PerStep: 4 * sec, By: ByWrapper, AfterCkpt: true},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var c IterClock
			var got []Iter
			for _, b := range tt.batches {
				got = append(got, c.Observe(b)...)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d iters %+v, want %d %+v", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				w := tt.want[i]
				w.At = got[i].At
				if got[i] != w {
					t.Errorf("iter %d = %+v, want %+v", i, got[i], w)
				}
			}
		})
	}
}

func TestIterClockWithTail(t *testing.T) {
	t.Parallel()
	h := newTailHarness(t, TailConfig{})
	var c IterClock
	var iters []Iter
	poll := func() {
		if err := h.tail.poll(func(evs []Event) { iters = append(iters, c.Observe(evs)...) }, false); err != nil {
			t.Fatal(err)
		}
	}
	h.write("isched1 step=10\n")
	poll()
	h.clock.Advance(200 * time.Millisecond)
	h.write("isched1 step=11\nisched1 step=12\n")
	poll()
	if len(iters) != 1 || iters[0].PerStep != 100*time.Millisecond || iters[0].Steps != 2 {
		t.Errorf("iters = %+v, want one of 2 steps at 100ms", iters)
	}
}
