package cli

import (
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

// TestWriteMemory: the status says which memory is which — the processes'
// (the need) and the cgroup's unreclaimable part and page cache apart — and
// an ended run carries its verdict.
func TestWriteMemory(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		name string
		st   report.JobStatus
		want []string
		not  []string
	}{{
		name: "ended checkpointing job",
		st: report.JobStatus{State: "ENDED", PeakRSSBytes: 643 * mib, MemLimitBytes: 1024 * mib, CgroupPeakBytes: 1020 * mib,
			PeakUnreclaimBytes: 660 * mib, PeakPageCacheBytes: 384 * mib},
		want: []string{"memory:     process peak RSS 643.0 MiB (limit 1.00 GiB)\n",
			"cgroup:     unreclaimable peak 660.0 MiB, page cache peak 384.0 MiB (kernel's peak, page cache included: 1020.0 MiB)\n"},
		not: []string{"peak RSS 1020"},
	}, {
		name: "running with page cache",
		st:   report.JobStatus{State: "RUNNING", RSSBytes: 600 * mib, PeakRSSBytes: 643 * mib, UnreclaimBytes: 620 * mib, PageCacheBytes: 256 * mib},
		want: []string{"memory:     RSS 600.0 MiB (peak 643.0 MiB)\n", "cgroup:     unreclaimable 620.0 MiB (the OOM risk), page cache 256.0 MiB (reclaimable)\n"},
	}, {
		name: "no cgroup split known",
		st:   report.JobStatus{State: "RUNNING", RSSBytes: 600 * mib, PeakRSSBytes: 643 * mib},
		not:  []string{"cgroup:"},
	}}
	for _, tt := range tests {
		var b strings.Builder
		writeProcessMemory(&b, &tt.st)
		for _, w := range tt.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: lacks %q:\n%s", tt.name, w, b.String())
			}
		}
		for _, n := range tt.not {
			if strings.Contains(b.String(), n) {
				t.Errorf("%s: has %q:\n%s", tt.name, n, b.String())
			}
		}
	}
	var b strings.Builder
	writeVerdict(&b, &report.JobStatus{Verdict: &report.Verdict{Lines: []string{"next time:  ask --mem=1G next time\x1b[31m"}}})
	if got := b.String(); got != "efficiency:\n  next time:  ask --mem=1G next time?[31m\n" && !strings.HasPrefix(got, "efficiency:\n  next time:  ask --mem=1G next time") || strings.Contains(got, "\x1b") {
		t.Errorf("verdict: %q", got)
	}
}
