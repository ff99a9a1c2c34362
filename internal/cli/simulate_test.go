package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/isched/isched/internal/sim"
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
	for _, want := range []string{"trace runtimes.csv", "\n0.9 ", "isched+dev", "isched-nocont", "slurm-multi", "Δ untouched wait", "ceiling"} {
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

// TestSimulateProgressOnlyOnATerminal: the progress bar's carriage
// returns and escape codes went into a pipe; the bar is drawn on a
// terminal only.
func TestSimulateProgressOnlyOnATerminal(t *testing.T) {
	h := newHarness(t)
	trace := filepath.Join(t.TempDir(), "runtimes.csv")
	if err := os.WriteFile(trace, []byte("runtime\n60\n600\n1800\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"simulate", "--trace", trace, "--site", "../sim/testdata/site-tiny.json", "--jobs", "10", "--seeds", "1", "--loads", "0.5"}
	for _, terminal := range []bool{false, true} {
		app := h.app()
		app.Terminal = func(io.Writer) bool { return terminal }
		var out, errb bytes.Buffer
		if code := app.Run(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		if drawn := strings.Contains(errb.String(), "\r["); drawn != terminal || (!terminal && strings.ContainsAny(errb.String(), "\r\033")) {
			t.Errorf("terminal %v: stderr %q", terminal, errb.String())
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

// TestSimulateJSON: --json prints the rows in the --json style: snake_case
// keys, the hours of sim.Row in seconds, each figure a mean with its
// interval's half width and the number of seeds.
func TestSimulateJSON(t *testing.T) {
	rows := simRowsJSON([]sim.Row{{Load: 0.9, Variant: "isched", JCT: sim.Interval{Mean: 2, Half: 0.5, N: 3},
		OtherWait: sim.Interval{Mean: 0.25, N: 1}, DJCT: sim.Interval{Mean: -0.25, Half: 0.05, N: 3}, Moves: sim.Interval{Mean: 1.5, N: 3}, Unfinished: 1}})
	b, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b, &got); err != nil || len(got) != 1 {
		t.Fatalf("%v %s", err, b)
	}
	r := got[0]
	for key, want := range map[string]any{
		"load": 0.9, "policy": "isched", "unfinished": 1.0,
		"mean_jct_s":       map[string]any{"mean": 7200.0, "ci95_half": 1800.0, "seeds": 3.0},
		"untouched_wait_s": map[string]any{"mean": 900.0, "ci95_half": 0.0, "seeds": 1.0},
		"d_jct":            map[string]any{"mean": -0.25, "ci95_half": 0.05, "seeds": 3.0},
		"moves_per_job":    map[string]any{"mean": 1.5, "ci95_half": 0.0, "seeds": 3.0},
	} {
		if !reflect.DeepEqual(r[key], want) {
			t.Errorf("%s = %v, want %v", key, r[key], want)
		}
	}
	h := newHarness(t)
	code, out, errs := h.run("simulate", "--trace", "../sim/testdata/sample.swf", "--site", "../sim/testdata/site-tiny.json",
		"--jobs", "20", "--seeds", "1", "--loads", "0.5", "--quiet", "--json")
	if code != 0 {
		t.Fatalf("simulate --json: exit %d: %s", code, errs)
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) == 0 || got[0]["policy"] == nil || got[0]["mean_jct_s"] == nil {
		t.Errorf("simulate --json: %v\n%s", err, out)
	}
}

// TestSimulateCoordinatorConfig: a site's own coordinator config sets the
// policy of the replay; a bad one is named.
func TestSimulateCoordinatorConfig(t *testing.T) {
	h := newHarness(t)
	code, out, errs := h.run("simulate", "--from-sacct", "../../examples/trace-lab.sacct", "--site", "../../examples/site-lab.json",
		"--coordinator-config", "../../examples/coordinator-labreplay.json", "--loads", "0", "--seeds", "1", "--jobs", "0", "--adoption", "1", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "trace-lab.sacct") || !strings.Contains(out, "isched-nocont") {
		t.Errorf("output:\n%s", out)
	}
	bad := filepath.Join(t.TempDir(), "coordinator.json")
	if err := os.WriteFile(bad, []byte(`{"policy": {"speed": {"gpu": -1}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = h.run("simulate", "--from-sacct", "../../examples/trace-lab.sacct", "--site", "../../examples/site-lab.json", "--coordinator-config", bad)
	if code == 0 || !strings.Contains(errs, "--coordinator-config") || !strings.Contains(errs, "policy.speed.gpu") {
		t.Errorf("bad config: exit %d: %s", code, errs)
	}
}

// TestSimulatePhilly: the Philly trace with real arrivals is known by
// its header and replayed at its own arrivals and faster (--load), with
// the offered load and the ceiling in every row; --loads is refused.
func TestSimulatePhilly(t *testing.T) {
	h := newHarness(t)
	args := []string{"simulate", "--trace", "../sim/testdata/philly_excerpt.csv", "--site", "../../examples/site-sim-philly.json",
		"--variants", "slurm-multi", "--seeds", "1", "--quiet"}
	code, out, errs := h.run(append(args, "--load", "1,5", "--csv", filepath.Join(t.TempDir(), "p.csv"))...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"trace philly_excerpt.csv", "\n1 ", "\n5 ", "slurm-multi", "ceiling"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "isched-auto") {
		t.Errorf("--variants slurm-multi ran isched-auto:\n%s", out)
	}
	if code, _, errs := h.run(append(args, "--loads", "0.5")...); code == 0 || !strings.Contains(errs, "--load") {
		t.Errorf("--loads on a philly trace: exit %d, %s", code, errs)
	}
	if code, _, errs := h.run(append(args, "--window", "9-3")...); code == 0 || !strings.Contains(errs, "--window") {
		t.Errorf("--window 9-3: exit %d, %s", code, errs)
	}
}

// TestSimulateCurie: a Curie log is known by its header and replayed for
// the fidelity of the waits.
func TestSimulateCurie(t *testing.T) {
	h := newHarness(t)
	code, out, errs := h.run("simulate", "--trace", "../sim/testdata/curie_excerpt.csv", "--site", "../../examples/site-sim-curie.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"jobs 7", "recorded", "replayed", "Spearman"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestSimulateCurieVariants: with --variants a Curie log is an
// experiment at its own arrivals, every job adoptable whatever its shape
// (its user's request kept): the table has a row per variant and the
// isched jobs are all of them at --adoption 1.
func TestSimulateCurieVariants(t *testing.T) {
	h := newHarness(t)
	code, out, errs := h.run("simulate", "--trace", "../sim/testdata/curie_excerpt.csv", "--site", "../../examples/site-sim-curie.json",
		"--variants", "slurm,isched+trim", "--adoption", "1", "--seeds", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(rows) != 2 || rows[1]["policy"] != "isched+trim" {
		t.Fatalf("rows %v", rows)
	}
	// the excerpt's jobs are CPU jobs of several nodes: isched's only by AnyShape
	isched, _ := rows[1]["isched_mean_jct_s"].(map[string]any)
	all, _ := rows[1]["mean_jct_s"].(map[string]any)
	if isched == nil || all == nil || isched["mean"] != all["mean"] {
		t.Errorf("isched jobs' mean JCT %v, want every job's %v (all adopted):\n%s", isched, all, out)
	}
	if code, _, errs := h.run("simulate", "--trace", "../sim/testdata/curie_excerpt.csv", "--site", "../../examples/site-sim-curie.json",
		"--variants", "slurm", "--loads", "0.5"); code != ExitUsage || !strings.Contains(errs, "own arrivals") {
		t.Errorf("--loads: exit %d %s", code, errs)
	}
}
