package cli

import (
	"fmt"
	"io"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
)

// writeProcessMemory writes the memory lines of `isched status`: the processes'
// resident memory (the job's need, what receipts learn), then the memory
// cgroup's charge apart — what the kernel cannot reclaim (the OOM risk) and
// page cache (checkpoints the job wrote, reclaimed before any OOM kill).
func writeProcessMemory(w io.Writer, s *report.JobStatus) {
	switch {
	case s.State == "ENDED" && s.PeakRSSBytes > 0:
		fmt.Fprintf(w, "memory:     process peak RSS %s", plan.FormatBytes(s.PeakRSSBytes))
		if s.MemLimitBytes > 0 {
			fmt.Fprintf(w, " (limit %s)", plan.FormatBytes(s.MemLimitBytes))
		}
		fmt.Fprintln(w)
		if s.PeakUnreclaimBytes > 0 || s.PeakPageCacheBytes > 0 || s.CgroupPeakBytes > 0 {
			fmt.Fprintf(w, "cgroup:     unreclaimable peak %s, page cache peak %s", plan.FormatBytes(s.PeakUnreclaimBytes),
				plan.FormatBytes(s.PeakPageCacheBytes))
			if s.CgroupPeakBytes > 0 {
				fmt.Fprintf(w, " (kernel's peak, page cache included: %s)", plan.FormatBytes(s.CgroupPeakBytes))
			}
			fmt.Fprintln(w)
		}
	case s.RSSBytes > 0 || s.PeakRSSBytes > 0:
		now := "RSS " + plan.FormatBytes(s.RSSBytes)
		if s.RSSBytes == 0 {
			// the last sample was of a process that had ended (an attempt
			// between its end and the next one's first sample)
			now = "no running process sampled yet"
		}
		fmt.Fprintf(w, "memory:     %s (peak %s", now, plan.FormatBytes(s.PeakRSSBytes))
		if s.MemLimitBytes > 0 {
			fmt.Fprintf(w, ", limit %s", plan.FormatBytes(s.MemLimitBytes))
		}
		fmt.Fprint(w, ")")
		if s.RSSSlope > 0 {
			fmt.Fprintf(w, ", growing %s/iteration", plan.FormatBytes(int64(s.RSSSlope)))
		}
		fmt.Fprintln(w)
		if s.UnreclaimBytes > 0 || s.PageCacheBytes > 0 {
			fmt.Fprintf(w, "cgroup:     unreclaimable %s (the OOM risk), page cache %s (reclaimable)\n",
				plan.FormatBytes(s.UnreclaimBytes), plan.FormatBytes(s.PageCacheBytes))
		}
	default:
		fmt.Fprintln(w, "memory:     no sample yet")
	}
}

// writeVerdict writes an ended run's efficiency summary.
func writeVerdict(w io.Writer, s *report.JobStatus) {
	v := s.Verdict
	if v == nil {
		return
	}
	fmt.Fprintln(w, "efficiency:")
	for _, l := range v.Lines {
		fmt.Fprintf(w, "  %s\n", clean(l))
	}
}
