package cli

import (
	"strings"
	"testing"
	"time"
)

func TestSignalLead(t *testing.T) {
	m := time.Minute
	cases := []struct {
		name   string
		limit  time.Duration
		ckpt   time.Duration
		want   int
		wantOK bool
	}{
		{"unknown limit, unmeasured checkpoint: 60 + 60 + 15 s", 0, 0, 135, true},
		{"long limit, unmeasured", 3 * time.Hour, 0, 135, true},
		{"measured 8 s checkpoint: 60 + 8 + 10 s", time.Hour, 8 * time.Second, 78, true},
		{"measured 10 min checkpoint: 60 + 600 + 150 s", 4 * time.Hour, 10 * m, 810, true},
		{"fractional seconds round up", time.Hour, 8*time.Second + time.Millisecond, 79, true},
		// issue 14: a 3-minute limit got 120 s, delivered 40 s in
		{"3-minute limit: capped so the earliest delivery is 60 s in", 3 * m, 0, 60, true},
		{"5-minute limit, slow checkpoint: capped at 180 s", 5 * m, 5 * m, 180, true},
		{"2-minute limit: no signal at all", 2 * m, 0, 0, false},
		{"1-minute limit: no signal at all", m, 0, 0, false},
		{"huge checkpoint: Slurm's maximum", 0, 30 * time.Hour, 65535, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := SignalLead(c.limit, c.ckpt)
			if got != c.want || ok != c.wantOK {
				t.Fatalf("SignalLead(%s, %s) = %d, %v; want %d, %v", c.limit, c.ckpt, got, ok, c.want, c.wantOK)
			}
			if ok && c.limit > 0 {
				// the property: Slurm's earliest delivery is after the first minute
				if earliest := c.limit - time.Duration(got)*time.Second - time.Minute; earliest < time.Minute {
					t.Errorf("earliest delivery %s into the run", earliest)
				}
			}
		})
	}
}

func TestScriptSignalLine(t *testing.T) {
	render := func(limit, ckpt time.Duration) string {
		t.Helper()
		s := Script{Partitions: []string{"cpu"}, TimeLimit: limit, CkptEstimate: ckpt, Wrapper: "/w", Argv: []string{"true"}}
		b, err := s.Render()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := render(3*time.Minute, 0); !strings.Contains(got, "#SBATCH --signal=USR1@60\n") {
		t.Errorf("3-minute limit:\n%s", got)
	}
	// --time=3 is what Slurm enforces for a 2m10s request: the lead follows it
	if got := render(2*time.Minute+10*time.Second, 0); !strings.Contains(got, "#SBATCH --time=3\n") || !strings.Contains(got, "#SBATCH --signal=USR1@60\n") {
		t.Errorf("2m10s limit:\n%s", got)
	}
	if got := render(2*time.Minute, 0); strings.Contains(got, "--signal") {
		t.Errorf("2-minute limit has a signal:\n%s", got)
	}
	if got := render(time.Hour, 20*time.Second); !strings.Contains(got, "#SBATCH --signal=USR1@90\n") {
		t.Errorf("measured checkpoint:\n%s", got)
	}
}

// A resubmission of a lineage whose checkpoint time the coordinator
// measured gets a lead from that time, not the default.
func TestSubmitSignalLeadFromMeasuredCheckpoint(t *testing.T) {
	h := newHarness(t)
	if err := h.mr.Set("isched:lab:job:{lab-run-1}:status", `{"lineage":"lab-run-1","ckpt_ms":20000}`); err != nil {
		t.Fatal(err)
	}
	args := func(lineage string) []string {
		return []string{"submit", "--dry-run", "--partition-ideal", "cpu", "--time", "60", "--mem", "2G", "--cpus", "2",
			"--lineage", lineage, "--wrapper", "/w", "--", "python3", "train.py"}
	}
	for lineage, want := range map[string]string{"lab-run-1": "#SBATCH --signal=USR1@90\n", "lab-run-2": "#SBATCH --signal=USR1@135\n"} {
		code, out, errOut := h.run(args(lineage)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !strings.Contains(out, want) {
			t.Errorf("lineage %s: want %q in\n%s", lineage, want, out)
		}
	}
}
