package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/isched/isched/internal/slurm"
)

// complete runs isched __complete ARGS... (what cobra's shell scripts
// call) and returns the words offered, without their descriptions, and
// the directive line.
func (h *harness) complete(args ...string) ([]string, string) {
	h.t.Helper()
	code, out, errOut := h.run(append([]string{"__complete"}, args...)...)
	if code != ExitOK {
		h.t.Fatalf("__complete %q: exit %d: %s", args, code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var words []string
	for _, l := range lines[:len(lines)-1] {
		w, _, _ := strings.Cut(l, "\t")
		words = append(words, w)
	}
	return words, lines[len(lines)-1]
}

// TestCompleteJobs: status, report and stop complete your own runs (job
// id, then lineage), never another user's; a second argument completes
// nothing.
func TestCompleteJobs(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	for _, cmd := range []string{"status", "report", "stop"} {
		words, directive := h.complete(cmd, "")
		want := []string{"42", "44", "lab-train-abababab", "lab-pending-2"}
		if !slices.Equal(words, want) || directive != ":4" {
			t.Errorf("%s: %q %s, want %q :4 (no files)", cmd, words, directive, want)
		}
	}
	if words, _ := h.complete("status", "42", ""); len(words) != 0 {
		t.Errorf("a second argument: %q", words)
	}
	if _, out, _ := h.run("__complete", "status", ""); !strings.Contains(out, "42\tlab-train-abababab\n") {
		t.Errorf("a job id is not described by its lineage:\n%s", out)
	}
}

// TestCompleteFlags: flag names, fixed values, and partitions from the
// site catalogue where Slurm lists none (a comma-separated list goes on
// after its last comma).
func TestCompleteFlags(t *testing.T) {
	h := newHarness(t)
	h.env["ISCHED_SITE"] = "../../examples/site-lab.json"
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"submit", "--qo"}, []string{"--qos"}},
		{[]string{"submit", "--policy", ""}, []string{"auto", "immediate", "ideal", "cheapest"}},
		{[]string{"estimate", "--precision", ""}, []string{"fp32", "bf16", "fp16"}},
		{[]string{"submit", "-p", ""}, []string{"dev", "gpu-dev", "cpu", "gpu", "scavenger"}},
		{[]string{"submit", "--fallback", "dev,"}, []string{"dev,dev", "dev,gpu-dev", "dev,cpu", "dev,gpu", "dev,scavenger"}},
		{[]string{"site", ""}, []string{"probe"}},
		{[]string{"help", "si"}, []string{"simulate", "site"}},
	} {
		words, _ := h.complete(c.args...)
		got := slices.DeleteFunc(words, func(w string) bool { return !strings.HasPrefix(w, c.args[len(c.args)-1]) })
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.args, got, c.want)
		}
	}
}

// TestCompletePartitionsFromSlurm: Slurm's partitions that are up and not
// hidden go before the catalogue's.
func TestCompletePartitionsFromSlurm(t *testing.T) {
	h := newHarness(t)
	h.env["ISCHED_SITE"] = "../../examples/site-lab.json"
	h.slurm.partitions = []slurm.PartitionInfo{{Name: "a100", State: "UP"}, {Name: "old", State: "DOWN"}, {Name: "admin", State: "UP", Hidden: true}}
	if words, _ := h.complete("submit", "--partition", ""); !slices.Equal(words, []string{"a100"}) {
		t.Errorf("%q, want [a100]", words)
	}
}
