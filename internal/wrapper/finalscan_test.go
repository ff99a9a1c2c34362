package wrapper

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
)

// lateWatcher is a checkpoint watcher whose events never arrive before the
// command exits: fsnotify had not delivered the last rename, or the
// debounce period was not over, when the wrapper stopped it.
type lateWatcher struct{}

func (lateWatcher) Run(ctx context.Context, _ func(CheckpointEvent)) error {
	<-ctx.Done()
	return nil
}

// runSavingTrainer runs the wrapper in a Slurm-like environment over a fake
// trainer that saves a checkpoint (write a temporary file, rename it) as its
// very last act and exits 0 at once, as a script does that saves and then
// runs `scontrol requeue` on itself or exits after a signal. It returns the
// reports delivered. The script finds the checkpoint directory in "$0".
func runSavingTrainer(t *testing.T, ck, script string) []*report.Envelope {
	t.Helper()
	tmp := t.TempDir()
	env := map[string]string{"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "lab", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": strconv.Itoa(os.Getuid()),
		"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_PARTITION": "cpu", "SLURMD_NODENAME": "cpu1", "SLURM_STEP_ID": "0", "TMPDIR": tmp}
	getenv := func(k string) string { return env[k] }
	opts, err := ParseArgs([]string{"--lineage", "lab-42", "--checkpoint-dir", ck, "--checkpoint-debounce", "10s",
		"--", "/bin/sh", "-c", script, ck}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &endSink{}
	var stderr bytes.Buffer
	code := Run(context.Background(), opts, Deps{
		Getenv: getenv, Stdout: &bytes.Buffer{}, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler),
		Connect: func(context.Context, string) (appender, error) { return sink, nil },
		NewCheckpointWatcher: func(string, string, time.Duration, time.Duration, *slog.Logger) (CheckpointWatcher, error) {
			return lateWatcher{}, nil
		},
	})
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	return sink.got
}

// saveLast is the fake trainer's last act: an atomic save of ckpt-<step>.pt.
func saveLast(step int) string {
	n := strconv.Itoa(step)
	return `printf weights > "$0/tmp-` + n + `.pt" && mv "$0/tmp-` + n + `.pt" "$0/ckpt-` + n + `.pt"`
}

// checkpointReports returns the checkpoint reports' paths and the end
// report, failing when a checkpoint report comes after the end.
func checkpointReports(t *testing.T, got []*report.Envelope) ([]string, *report.End) {
	t.Helper()
	var paths []string
	var end *report.End
	for _, e := range got {
		switch {
		case e.Checkpoint != nil:
			if end != nil {
				t.Errorf("checkpoint report %s after the end report", e.Checkpoint.Path)
			}
			paths = append(paths, e.Checkpoint.Path)
		case e.End != nil:
			end = e.End
		}
	}
	if end == nil {
		t.Fatal("no end report")
	}
	return paths, end
}

func resumeStep(t *testing.T, ck, lineage string) (string, int64) {
	t.Helper()
	p, _, ok, err := loadResume(ck, lineage)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "", -1
	}
	if p.Step == nil {
		return filepath.Base(p.Path), 0
	}
	return filepath.Base(p.Path), *p.Step
}

// TestFinalScanRecordsLastCheckpoint: a checkpoint saved immediately before
// the command exits, which the watcher never delivered, is found by the
// wrapper's final scan: it is the lineage's resume point, reported as a
// checkpoint before the end report, and counted in the end report.
func TestFinalScanRecordsLastCheckpoint(t *testing.T) {
	ck := t.TempDir()
	paths, end := checkpointReports(t, runSavingTrainer(t, ck, saveLast(300)+"; exit 0"))
	want := filepath.Join(ck, "ckpt-300.pt")
	if len(paths) != 1 || paths[0] != want || end.Checkpoints != 1 {
		t.Errorf("checkpoint reports %q, end report's checkpoints %d; want [%s] and 1", paths, end.Checkpoints, want)
	}
	if f, s := resumeStep(t, ck, "lab-42"); f != "ckpt-300.pt" || s != 300 {
		t.Errorf("resume point %q step %d, want ckpt-300.pt step 300", f, s)
	}
}

// The final scan never takes an older checkpoint than the lineage's newest
// recorded one, nor one still being written, nor a checkpoint that was
// there before the attempt began.
func TestFinalScanTakesOnlyNewerCompleteCheckpoints(t *testing.T) {
	cases := []struct {
		name     string
		before   func(t *testing.T, ck string) // the lineage's state before the attempt
		script   string
		wantFile string
		wantStep int64
		reports  int
	}{
		{"older than the recorded one: the recorded one stays", func(t *testing.T, ck string) {
			p := filepath.Join(ck, "ckpt-400.pt")
			if err := os.WriteFile(p, []byte("weights"), 0o600); err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(p)
			step := int64(400)
			checkpointSeen(CheckpointEvent{Path: p, Size: fi.Size(), MTime: fi.ModTime(), Step: &step}, &state{ckptSeen: map[string]bool{}}, nil,
				Options{CheckpointDir: ck}, report.JobRef{Lineage: "lab-42", JobID: 42}, slog.New(slog.DiscardHandler))
		}, saveLast(300), "ckpt-400.pt", 400, 0},
		{"a half-written Hugging Face directory is not taken", nil,
			`mkdir "$0/checkpoint-500" && printf w > "$0/checkpoint-500/model.safetensors"`, "", -1, 0},
		{"a complete Hugging Face directory is", nil,
			`mkdir "$0/checkpoint-500" && printf w > "$0/checkpoint-500/model.safetensors" && printf '{}' > "$0/checkpoint-500/trainer_state.json"`,
			"checkpoint-500", 500, 1},
		{"a checkpoint there before the attempt is not this attempt's", func(t *testing.T, ck string) {
			p := filepath.Join(ck, "ckpt-100.pt")
			if err := os.WriteFile(p, []byte("weights"), 0o600); err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-time.Hour)
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}, "true", "", -1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ck := t.TempDir()
			if c.before != nil {
				c.before(t, ck)
			}
			paths, end := checkpointReports(t, runSavingTrainer(t, ck, c.script))
			if len(paths) != c.reports || end.Checkpoints != c.reports {
				t.Errorf("checkpoint reports %q, end report's checkpoints %d; want %d", paths, end.Checkpoints, c.reports)
			}
			if f, s := resumeStep(t, ck, "lab-42"); f != c.wantFile || s != c.wantStep {
				t.Errorf("resume point %q step %d, want %q step %d", f, s, c.wantFile, c.wantStep)
			}
		})
	}
}
