package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isched/isched/internal/sim"
)

// TestLinePlotLogAxisWithZero: a completion time of 0 on the log axis of
// the JCT CDF panicked in gonum ("Values must be greater than 0 for a log
// scale"); such points are left out of a log axis.
func TestLinePlotLogAxisWithZero(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cdf.svg")
	series := []sim.Series{{Name: "slurm", X: []float64{0, 0, 0.5, 2}, Y: []float64{0.25, 0.5, 0.75, 1}},
		{Name: "only zeros", X: []float64{0}, Y: []float64{1}}}
	if err := linePlot(path, "t", "hours (log)", "fraction", series, true); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "<svg") {
		t.Fatalf("no SVG written: %v", err)
	}
}
