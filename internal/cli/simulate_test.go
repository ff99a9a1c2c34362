package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimulate(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	// run times of minutes to hours: the replays stay short
	trace := filepath.Join(dir, "runtimes.csv")
	if err := os.WriteFile(trace, []byte("runtime\n60\n600\n1800\n3600\n7200\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := h.run("simulate", "--trace", trace, "--mix", "../sim/testdata/openb_pod_excerpt.csv",
		"--site", "../sim/testdata/site-tiny.json", "--dev", "dev", "--jobs", "40", "--seeds", "2", "--loads", "0.5,0.9",
		"--quiet", "--plots", dir, "--csv", filepath.Join(dir, "t.csv"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"trace runtimes.csv", "0.9   slurm", "isched+dev", "isched-nocont", "Δ untouched wait"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"jct-cdf.svg", "wait-over-time.svg", "utilisation.svg", "t.csv"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestSimulateUsage(t *testing.T) {
	h := newHarness(t)
	for _, args := range [][]string{
		{"simulate", "--site", "../sim/testdata/site-tiny.json"},
		{"simulate", "--trace", "x.swf"},
		{"simulate", "--trace", "../sim/testdata/sample.swf", "--site", "../sim/testdata/site-tiny.json", "--loads", "high"},
	} {
		if code, _, errs := h.run(args...); code != ExitUsage || errs == "" {
			t.Errorf("%v: exit %d (%s), want a usage error", args, code, errs)
		}
	}
}
