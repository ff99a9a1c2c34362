package coordinator

import (
	"fmt"
	"time"

	"github.com/isched/isched/internal/report"
)

// applyEndMemory folds what an end report measured of memory into the
// lineage: the kernel's peak of the job's cgroup (which sees an allocation
// made between two samples, the one that usually kills a job), its memory
// limit and, when the job was OOM-killed, an "oom" event. The lineage's
// memory estimate learns from an OOM kill: the next attempt needs at least
// what the killed one was allowed, since that was not enough.
func (c *Coordinator) applyEndMemory(l *lineage, end *report.End, now time.Time) {
	st := &l.Status
	st.PeakRSSBytes = max(st.PeakRSSBytes, end.PeakRSSBytes, end.CgroupPeakBytes)
	if end.MemLimitBytes > 0 {
		st.MemLimitBytes = end.MemLimitBytes
	}
	l.Mem.PeakRSS = max(l.Mem.PeakRSS, end.CgroupPeakBytes)
	if end.Reason != report.EndOOM {
		return
	}
	l.Mem.PeakRSS = max(l.Mem.PeakRSS, end.MemLimitBytes, st.PeakRSSBytes)
	l.event(now, "oom", oomMessage(end))
}

func oomMessage(end *report.End) string {
	peak := max(end.PeakRSSBytes, end.CgroupPeakBytes)
	if end.MemLimitBytes > 0 {
		return fmt.Sprintf("killed by the kernel at its memory limit of %d MiB; measured peak %d MiB: the next attempt needs more memory",
			end.MemLimitBytes>>20, peak>>20)
	}
	return fmt.Sprintf("killed at its memory limit; measured peak %d MiB", peak>>20)
}
