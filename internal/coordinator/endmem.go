package coordinator

import (
	"fmt"
	"time"

	"github.com/isched/isched/internal/report"
)

// applyEndMemory folds what an end report measured of memory into the
// lineage: the process tree's peak (VmHWM included, so an allocation made
// between two samples counts), the cgroup's charge apart (what could not be
// reclaimed, page cache, the kernel's peak of both), its memory limit and,
// when the job was OOM-killed, an "oom" event.
//
// The lineage's memory need (PeakRSSBytes, the planner's receipts) is the
// process memory: the cgroup's peak counts the page cache of the job's
// checkpoints, which the kernel reclaims before it kills anything, and would
// teach the planner a need up to 60 % too high. Only an OOM kill raises the
// need to what the job was allowed, since that was not enough, and makes
// the cgroup's peak the job's.
func (c *Coordinator) applyEndMemory(l *lineage, end *report.End, now time.Time) {
	st := &l.Status
	st.PeakRSSBytes = max(st.PeakRSSBytes, end.PeakRSSBytes)
	st.CgroupPeakBytes = max(st.CgroupPeakBytes, end.CgroupPeakBytes)
	st.PeakUnreclaimBytes = max(st.PeakUnreclaimBytes, end.UnreclaimPeakBytes)
	st.PeakPageCacheBytes = max(st.PeakPageCacheBytes, end.PageCachePeakBytes)
	if end.MemLimitBytes > 0 {
		st.MemLimitBytes = end.MemLimitBytes
	}
	l.Mem.PeakRSS = max(l.Mem.PeakRSS, end.PeakRSSBytes)
	l.Use.add(end)
	if end.Reason != report.EndOOM {
		return
	}
	// At an OOM kill the kernel had reclaimed all the page cache it could:
	// the cgroup's peak was the job's memory then.
	st.PeakRSSBytes = max(st.PeakRSSBytes, end.CgroupPeakBytes)
	l.Mem.PeakRSS = max(l.Mem.PeakRSS, end.MemLimitBytes, st.PeakRSSBytes)
	l.event(now, "oom", oomMessage(end))
}

func oomMessage(end *report.End) string {
	// at the kill, the cgroup held what could not be reclaimed
	peak := max(end.PeakRSSBytes, end.UnreclaimPeakBytes, end.CgroupPeakBytes)
	if end.MemLimitBytes > 0 {
		return fmt.Sprintf("killed by the kernel at its memory limit of %d MiB; measured peak %d MiB: the next attempt needs more memory",
			end.MemLimitBytes>>20, peak>>20)
	}
	return fmt.Sprintf("killed at its memory limit; measured peak %d MiB", peak>>20)
}
