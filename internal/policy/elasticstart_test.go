package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

func TestStartSize(t *testing.T) {
	t.Parallel()
	on := Config{Elastic: true}
	e := report.Elastic{Min: 1, Max: 4}
	room := func(mod func(*StartRoom)) StartRoom {
		r := StartRoom{Queue: QueueRoom{Idle: 7, MostFree: 7}, PerNode: 8, LimitRoom: -1, Run: 2 * time.Hour}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	cases := []struct {
		name   string
		cfg    Config
		e      report.Elastic
		room   StartRoom
		want   int
		reason string
	}{
		{"off", Config{}, e, room(nil), 1, "off"},
		{"idle GPUs: its largest size", on, e, room(nil), 4, "starts at 4 GPUs"},
		{"a waiting job keeps it at its base", on, e, room(func(r *StartRoom) { r.Queue.Demand = 1 }), 1, "jobs wait for 1 GPUs"},
		{"no prediction: its base", on, e, room(func(r *StartRoom) { r.Run = 0 }), 1, "not predicted"},
		{"one node's idle GPUs bound it", on, e, room(func(r *StartRoom) { r.Queue.MostFree = 2 }), 2, "starts at 2 GPUs"},
		{"a node smaller than its max", on, report.Elastic{Min: 2, Max: 16}, room(func(r *StartRoom) { r.Queue = QueueRoom{Idle: 16, MostFree: 8} }), 8, "starts at 8 GPUs"},
		{"headroom kept idle", Config{Elastic: true, ElasticHeadroom: 5}, e, room(nil), 2, "starts at 2 GPUs"},
		{"headroom takes all", Config{Elastic: true, ElasticHeadroom: 7}, e, room(nil), 1, "7 kept for arrivals"},
		// 16 nodes of 8 keep a quarter, 32 GPUs, idle
		{"the default headroom", on, e, room(func(r *StartRoom) { r.Queue = QueueRoom{Idle: 34, MostFree: 8, FreeNodes: 2, GPUs: 128, Nodes: 16} }),
			2, "starts at 2 GPUs"},
		{"the default headroom takes all", on, e, room(func(r *StartRoom) { r.Queue = QueueRoom{Idle: 33, MostFree: 8, FreeNodes: 2, GPUs: 128, Nodes: 16} }),
			1, "32 kept for arrivals"},
		{"its owner's limits", on, e, room(func(r *StartRoom) { r.LimitRoom = 3 }), 3, "starts at 3 GPUs"},
		{"limits below its base", on, e, room(func(r *StartRoom) { r.LimitRoom = 0 }), 1, "0 under its owner's limits"},
		// 2 GPUs save 0.44 × the run, 4 save 0.69 ×: 68 s (1.5 × 45 s) needs
		// a run over 98 s at 4 GPUs and over 152 s at 2
		{"a short run gains too little", on, e, room(func(r *StartRoom) { r.Run = 90 * time.Second }), 1, "too short"},
		{"a run just long enough for 4", on, e, room(func(r *StartRoom) { r.Run = 100 * time.Second }), 4, "starts at 4 GPUs"},
		{"a run too short for 4 and 3", on, e, room(func(r *StartRoom) { r.Run = 95 * time.Second; r.Queue.MostFree = 2 }), 1, "too short"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := StartSize(c.cfg, c.e, c.room)
			if got != c.want || !strings.Contains(why, c.reason) {
				t.Errorf("StartSize = %d (%s), want %d with %q", got, why, c.want, c.reason)
			}
		})
	}
}

func TestShrinkWaiting(t *testing.T) {
	t.Parallel()
	on := Config{Elastic: true, MinPending: time.Minute}
	w := func(mod func(*WaitingRun)) []WaitingRun {
		r := WaitingRun{JobID: 9, Queue: "gpu", Size: 4, Min: 1, PerNode: 8, Waited: 2 * time.Minute, Blocked: true}
		if mod != nil {
			mod(&r)
		}
		return []WaitingRun{r}
	}
	cases := []struct {
		name string
		cfg  Config
		runs []WaitingRun
		want string // "" none; else "From→To Gres"
	}{
		{"off", Config{MinPending: time.Minute}, w(nil), ""},
		{"waited above its base: back to it", on, w(nil), "4→1 gpu:1"},
		{"a base of 2 on one node", on, w(func(r *WaitingRun) { r.Min = 2 }), "4→2 gpu:2"},
		{"a base of two whole nodes", on, w(func(r *WaitingRun) { r.Size, r.Min, r.PerNode = 32, 16, 8 }), "32→16 gpu:8"},
		{"not yet MinPending", on, w(func(r *WaitingRun) { r.Waited = 30 * time.Second }), ""},
		{"at its base already", on, w(func(r *WaitingRun) { r.Size = 1 }), ""},
		{"held, not waiting for GPUs", on, w(func(r *WaitingRun) { r.Blocked = false }), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ShrinkWaiting(c.cfg, c.runs)
			s := ""
			if len(got) > 0 {
				s = fmt.Sprintf("%d→%d %s", got[0].From, got[0].To, got[0].Gres)
				if !got[0].Shrink || !strings.Contains(got[0].Reason, "setting it back to its base") {
					t.Errorf("choice %+v", got[0])
				}
			}
			if s != c.want || len(got) > 1 {
				t.Errorf("ShrinkWaiting = %q (%d choices), want %q", s, len(got), c.want)
			}
		})
	}
}
