package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// TestETABandLine: the ETA line states the band's coverage when it is
// calibrated, says when it is not, and reads as before for a coordinator
// that does not say.
func TestETABandLine(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	at := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	base := report.JobStatus{State: "RUNNING", TotalIters: 100, IterMS: 1, ETAMS: at(65 * time.Minute), ETALowMS: at(50 * time.Minute), ETAHighMS: at(90 * time.Minute)}
	for _, tc := range []struct {
		name  string
		edit  func(*report.JobStatus)
		want  string
		avoid string
	}{
		{"calibrated", func(s *report.JobStatus) { s.ETABandCoverage, s.ETABandSource, s.ETABandRuns = 0.8, "conformal", 12 },
			"; 80 % band 13:50:00–14:30:00 (from 12 earlier runs)", "unknown"},
		{"too few runs", func(s *report.JobStatus) { s.ETABandSource, s.ETABandRuns = "default", 3 },
			"; band 13:50:00–14:30:00 (coverage unknown: 3 earlier runs, too few to calibrate)", "%"},
		{"an older coordinator", func(*report.JobStatus) {}, "; band 13:50:00 to 14:30:00", "coverage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := base
			tc.edit(&s)
			got := eta(&s, now)
			if !strings.HasPrefix(got, "14:05:00 (in ") || !strings.Contains(got, tc.want) || strings.Contains(got, tc.avoid) {
				t.Errorf("eta = %q, want %q in it, not %q", got, tc.want, tc.avoid)
			}
		})
	}
}
