package progress

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The snippet drives scripts/isched.py the way a training loop would.
const pythonSnippet = `
import math, sys
sys.path.insert(0, sys.argv[1])
import isched
isched.resumed(100, "ckpt/step100.pt")
isched.step(101, epoch=2, loss=0.4123, samples=3232, total=1000, epochs=10, steps_per_epoch=100)
isched.step(102, loss=float("nan"))
isched.step(103, loss=float("-inf"), epoch=2)
isched.step(104, loss=1e-05)
isched.checkpoint("/scratch/run 1/ep=3/chéckpoint%.pt")
isched.checkpoint("rel.pt", step=7)
isched.save(lambda p: open(p, "wb").write(b"w"), sys.argv[2] + "/last.pt", step=104)
print("isched1 step=105 t=1732242000.5", flush=True)
`

// TestPythonHelperLines checks that what scripts/isched.py writes is what
// ParseLine accepts, with the values the loop passed.
func TestPythonHelperLines(t *testing.T) {
	t.Parallel()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s is needed to test scripts/isched.py (python3 is always installed on Debian): %v", python, err)
	}
	scripts, err := filepath.Abs(filepath.Join("..", "..", "scripts"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	progressFile := filepath.Join(dir, "progress")
	cmd := exec.Command(python, "-c", pythonSnippet, scripts, dir)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ISCHED_PROGRESS_FILE="+progressFile, "RANK=", "SLURM_PROCID=", "ISCHED_ALL_RANKS=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("python warned: %s", stderr.String())
	}
	data, err := os.ReadFile(progressFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	if last := lines[len(lines)-1]; last != "" {
		t.Fatalf("unterminated last line %q", last)
	}
	lines = lines[:len(lines)-1]

	now := float64(time.Now().Unix())
	want := []Event{
		{Kind: KindResume, Step: 100, Epoch: NoValue, Path: filepath.Join(dir, "ckpt/step100.pt")},
		{Kind: KindStep, Step: 101, Epoch: 2, Samples: 3232, Loss: f64(0.4123), Total: 1000, Epochs: 10, StepsPerEpoch: 100},
		{Kind: KindStep, Step: 102, Epoch: NoValue, NonFinite: true},
		{Kind: KindStep, Step: 103, Epoch: 2, NonFinite: true},
		{Kind: KindStep, Step: 104, Epoch: NoValue, Loss: f64(1e-05)},
		{Kind: KindCkpt, Step: 104, Epoch: 2, Path: "/scratch/run 1/ep=3/chéckpoint%.pt"},
		{Kind: KindCkpt, Step: 7, Epoch: 2, Path: filepath.Join(dir, "rel.pt")},
		{Kind: KindCkpt, Step: 104, Epoch: 2, Path: filepath.Join(dir, "last.pt")},
	}
	if len(lines) != len(want) {
		t.Fatalf("python wrote %d lines, want %d:\n%s", len(lines), len(want), data)
	}
	for i, line := range lines {
		ev, err := ParseLine([]byte(line))
		if err != nil {
			t.Errorf("line %d %q: %v", i, line, err)
			continue
		}
		if ev.LoopTime < now-3600 || ev.LoopTime > now+3600 {
			t.Errorf("line %d %q: t=%v is not the loop's clock (now %v)", i, line, ev.LoopTime, now)
		}
		ev.LoopTime = 0
		if !equalEvent(ev, want[i]) {
			t.Errorf("line %d %q:\n got %+v\nwant %+v", i, line, ev, want[i])
		}
	}

	// The same format printed to stdout goes through the isched preset.
	m, err := NewMatcher("isched")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	evs := append(m.Feed(stdout.Bytes(), at), m.Flush(at)...)
	if len(evs) != 1 || evs[0].Step != 105 || evs[0].LoopTime != 1732242000.5 {
		t.Errorf("stdout events = %+v, want step 105", evs)
	}
}

// TestPythonHelperUnitTests runs scripts/test_isched.py (the helper's own
// unittest suite: no-ops without the wrapper, FIFOs and symlinks refused,
// saves atomic, control file and signals) as part of the Go tests.
func TestPythonHelperUnitTests(t *testing.T) {
	t.Parallel()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s is needed to test scripts/isched.py: %v", python, err)
	}
	cmd := exec.Command(python, "-m", "unittest", "-v", "test_isched")
	cmd.Dir = filepath.Join("..", "..", "scripts")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("\nOK")) {
		t.Fatalf("python3 -m unittest test_isched: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out[bytes.LastIndex(out, []byte("Ran ")):]))
}
