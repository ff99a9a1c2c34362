package policy

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestOrder(t *testing.T) {
	t.Parallel()
	on := Config{OrderByRemaining: true}
	q := func(id uint64, queue string, prio int64, rem time.Duration, waited time.Duration) Queued {
		return Queued{JobID: id, Queue: queue, Priority: prio, Remaining: rem, PendingSince: now.Add(-waited)}
	}
	type want struct {
		id         uint64
		nice, prio int64
	}
	tests := []struct {
		name string
		cfg  Config
		q    []Queued
		want []want
	}{
		{"off", Config{}, []Queued{q(1, "cpu", 100, 3*time.Hour, time.Hour), q(2, "cpu", 99, 10*time.Minute, time.Minute)}, nil},
		{"the short one takes the long one's place", on,
			[]Queued{q(1, "cpu", 100, 3*time.Hour, time.Hour), q(2, "cpu", 99, 10*time.Minute, time.Minute)},
			[]want{{1, 1, 99}, {2, -1, 100}}},
		{"already in order", on, []Queued{q(1, "cpu", 100, time.Minute, time.Hour), q(2, "cpu", 99, time.Hour, time.Minute)}, nil},
		{"places held are exchanged, the priorities between them untouched", on,
			// an outside job at 200 keeps exactly one isched job ahead of it
			[]Queued{q(1, "cpu", 300, 5*time.Hour, time.Hour), q(2, "cpu", 100, time.Hour, time.Minute)},
			[]want{{1, 200, 100}, {2, -200, 300}}},
		{"a job waiting past the guard keeps its place", on,
			[]Queued{q(1, "cpu", 300, 5*time.Hour, 30*time.Hour), q(2, "cpu", 100, time.Hour, time.Minute), q(3, "cpu", 200, 2*time.Hour, time.Minute)},
			[]want{{2, -100, 200}, {3, 100, 100}}},
		{"a job of unknown length keeps its place", on,
			[]Queued{q(1, "cpu", 300, 0, time.Hour), q(2, "cpu", 100, time.Hour, time.Minute), q(3, "cpu", 200, 2*time.Hour, time.Minute)},
			[]want{{2, -100, 200}, {3, 100, 100}}},
		{"tied places are split by one, the older first", on,
			[]Queued{q(1, "cpu", 100, 2*time.Hour, time.Hour), q(2, "cpu", 100, time.Hour, time.Minute)},
			[]want{{1, 1, 99}}},
		{"queues apart", on,
			[]Queued{q(1, "cpu", 100, 3*time.Hour, time.Hour), q(2, "gpu", 99, 10*time.Minute, time.Minute)}, nil},
		{"nice already set is kept in the sum", on,
			[]Queued{q(1, "cpu", 100, 3*time.Hour, time.Hour), {JobID: 2, Queue: "cpu", Priority: 99, Nice: 50, Remaining: time.Minute, PendingSince: now}},
			[]want{{1, 1, 99}, {2, 49, 100}}},
		{"out of Slurm's nice range: left", on,
			[]Queued{q(1, "cpu", 100, 3*time.Hour, time.Hour), {JobID: 2, Queue: "cpu", Priority: 99, Nice: -MaxNice, Remaining: time.Minute, PendingSince: now}},
			[]want{{1, 1, 99}}},
		{"one job: nothing to exchange", on, []Queued{q(1, "cpu", 100, 3*time.Hour, time.Hour)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []want
			for _, r := range Order(tc.cfg, tc.q, now) {
				got = append(got, want{r.JobID, r.Nice, r.Priority})
				if !strings.HasPrefix(r.Reason, "order: shortest predicted remaining first among isched's") {
					t.Errorf("reason %q", r.Reason)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestOrderIsStable: once Slurm shows the new priorities, Order asks for
// nothing more, and the set of priorities held is the one before.
func TestOrderIsStable(t *testing.T) {
	t.Parallel()
	cfg := Config{OrderByRemaining: true}
	jobs := []Queued{
		{JobID: 1, Queue: "cpu", Priority: 500, Remaining: 9 * time.Hour, PendingSince: now.Add(-3 * time.Hour)},
		{JobID: 2, Queue: "cpu", Priority: 400, Remaining: time.Hour, PendingSince: now.Add(-2 * time.Hour)},
		{JobID: 3, Queue: "cpu", Priority: 400, Remaining: 3 * time.Hour, PendingSince: now.Add(-time.Hour)},
		{JobID: 4, Queue: "cpu", Priority: 10, Remaining: 20 * time.Minute, PendingSince: now},
	}
	before := map[int64]int{}
	for _, j := range jobs {
		before[j.Priority]++
	}
	for _, r := range Order(cfg, jobs, now) {
		for i := range jobs {
			if jobs[i].JobID == r.JobID {
				jobs[i].Nice, jobs[i].Priority = r.Nice, r.Priority
			}
		}
	}
	if again := Order(cfg, jobs, now); len(again) != 0 {
		t.Errorf("asked again: %+v", again)
	}
	order := map[uint64]int64{}
	for _, j := range jobs {
		order[j.JobID] = j.Priority
	}
	if !(order[4] > order[2] && order[2] > order[3] && order[3] > order[1]) {
		t.Errorf("priorities %v: want 4, 2, 3, 1 (shortest first)", order)
	}
	// the places: 500, 400, 399 (the tie split), 10
	after := map[int64]int{}
	for _, j := range jobs {
		after[j.Priority]++
	}
	if !reflect.DeepEqual(after, map[int64]int{500: 1, 400: 1, 399: 1, 10: 1}) {
		t.Errorf("places held %v, before %v", after, before)
	}
}
