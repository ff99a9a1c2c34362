package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

func TestApplyEndMemory(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	now := time.UnixMilli(1_800_000_000_000)
	tests := []struct {
		name              string
		peak, memPeak     int64 // status and estimate before
		end               report.End
		wantPeak, wantLim int64
		wantMem           int64
		wantOOM           bool
		wantCg            int64 // the cgroup's peak, shown apart
		wantUnrecl        int64
		wantCache         int64
	}{{
		name: "oom between two samples", peak: 12 * mib, memPeak: 12 * mib,
		end:      report.End{ExitCode: 137, Signal: "SIGKILL", Reason: report.EndOOM, PeakRSSBytes: 13 * mib, CgroupPeakBytes: 300 * mib, MemLimitBytes: 300 * mib},
		wantPeak: 300 * mib, wantLim: 300 * mib, wantMem: 300 * mib, wantOOM: true, wantCg: 300 * mib,
	}, {
		name: "oom, cgroup peak below the limit (page cache reclaimed): the estimate still learns the limit", peak: 12 * mib, memPeak: 12 * mib,
		end:      report.End{ExitCode: 137, Signal: "SIGKILL", Reason: report.EndOOM, PeakRSSBytes: 13 * mib, CgroupPeakBytes: 290 * mib, MemLimitBytes: 300 * mib},
		wantPeak: 290 * mib, wantLim: 300 * mib, wantMem: 300 * mib, wantOOM: true, wantCg: 290 * mib,
	}, {
		name: "oom from an old wrapper (no cgroup fields)", peak: 200 * mib, memPeak: 150 * mib,
		end:      report.End{ExitCode: 137, Signal: "SIGKILL", Reason: report.EndOOM, PeakRSSBytes: 250 * mib},
		wantPeak: 250 * mib, wantMem: 250 * mib, wantOOM: true,
	}, {
		// the case: 643 MiB of process memory, 1020 MiB of cgroup
		// peak with the checkpoints' page cache
		name: "checkpointing job: the need is the process memory, not the page cache", peak: 600 * mib, memPeak: 600 * mib,
		end: report.End{ExitCode: 0, Reason: report.EndExited, PeakRSSBytes: 643 * mib, CgroupPeakBytes: 1020 * mib, MemLimitBytes: 1 << 30,
			UnreclaimPeakBytes: 660 * mib, PageCachePeakBytes: 384 * mib},
		wantPeak: 643 * mib, wantLim: 1 << 30, wantMem: 643 * mib, wantCg: 1020 * mib, wantUnrecl: 660 * mib, wantCache: 384 * mib,
	}, {
		name: "nothing new", peak: 100 * mib, memPeak: 100 * mib,
		end:      report.End{ExitCode: 0, Reason: report.EndExited},
		wantPeak: 100 * mib, wantMem: 100 * mib,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := &lineage{}
			l.Status.PeakRSSBytes = tt.peak
			l.Mem.PeakRSS = tt.memPeak
			(&Coordinator{}).applyEndMemory(l, &tt.end, now)
			st := l.Status
			if st.PeakRSSBytes != tt.wantPeak || st.MemLimitBytes != tt.wantLim || l.Mem.PeakRSS != tt.wantMem {
				t.Errorf("peak %d MiB, limit %d MiB, estimate %d MiB; want %d, %d, %d",
					st.PeakRSSBytes>>20, st.MemLimitBytes>>20, l.Mem.PeakRSS>>20, tt.wantPeak>>20, tt.wantLim>>20, tt.wantMem>>20)
			}
			if st.CgroupPeakBytes != tt.wantCg || st.PeakUnreclaimBytes != tt.wantUnrecl || st.PeakPageCacheBytes != tt.wantCache {
				t.Errorf("cgroup peak %d MiB, unreclaimable %d MiB, page cache %d MiB; want %d, %d, %d", st.CgroupPeakBytes>>20,
					st.PeakUnreclaimBytes>>20, st.PeakPageCacheBytes>>20, tt.wantCg>>20, tt.wantUnrecl>>20, tt.wantCache>>20)
			}
			var oom *report.StatusEvent
			for i := range st.Events {
				if st.Events[i].Kind == "oom" {
					oom = &st.Events[i]
				}
			}
			if (oom != nil) != tt.wantOOM {
				t.Fatalf("events %+v, want an oom event: %v", st.Events, tt.wantOOM)
			}
			if oom != nil && (oom.AtMS != now.UnixMilli() || !strings.Contains(oom.Message, "peak")) {
				t.Errorf("oom event %+v", *oom)
			}
			if oom != nil && tt.end.MemLimitBytes > 0 && !strings.Contains(oom.Message, "limit of 300 MiB") {
				t.Errorf("oom message %q does not name the limit", oom.Message)
			}
		})
	}
}

// TestOOMEndReachesStatus: through Redis, an end report saying oom puts an
// oom event, the cgroup's peak (at the kill, the job's) and the limit in
// the lineage's status, and the lineage's memory estimate keeps at least the
// limit.
func TestOOMEndReachesStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := report.Plan{Lineage: "L70", Ideal: "cpu", Total: 200}
	j := job(70, 1001, "alice", "RUNNING", "cpu", plan.FormatComment())
	e.publish([]report.Job{j}, nil)
	w := e.wrapper(70, 1001, "alice", "L70", "cpu")
	e.start(w)
	e.sample(w, 1, 9, 200) // peak 120 MiB
	e.rounds(1)
	end := report.NewEnvelope(report.KindEnd, e.now)
	end.End = &report.End{ExitCode: 137, Signal: "SIGKILL", Iters: 9, Reason: report.EndOOM,
		PeakRSSBytes: 120 << 20, CgroupPeakBytes: 300 << 20, MemLimitBytes: 300 << 20}
	e.send(w, end)
	e.rounds(1)
	st := e.status("L70")
	var kinds []string
	for _, ev := range st.Events {
		kinds = append(kinds, ev.Kind)
	}
	if !strings.Contains(strings.Join(kinds, ","), "oom") {
		t.Errorf("events %v, want oom", kinds)
	}
	if n := len(st.History); n == 0 || st.History[n-1].Reason != report.EndOOM {
		t.Errorf("history %+v, want the span to end oom", st.History)
	}
	if st.PeakRSSBytes != 300<<20 || st.CgroupPeakBytes != 300<<20 || st.MemLimitBytes != 300<<20 {
		t.Errorf("peak %d, cgroup peak %d, limit %d; want 300 MiB each (at an OOM kill the cgroup's peak is the job's)", st.PeakRSSBytes, st.CgroupPeakBytes, st.MemLimitBytes)
	}
	if l := e.c.lineages["L70"]; l == nil || l.Mem.PeakRSS < 300<<20 {
		t.Errorf("memory estimate does not keep the limit: %+v", l)
	}
	j.State = "FAILED"
	e.publish([]report.Job{j}, nil)
	e.rounds(1)
	if st := e.status("L70"); st.State == "RUNNING" || st.State == "PENDING" {
		t.Errorf("lineage state %q after the OOM-killed job failed", st.State)
	}
}
