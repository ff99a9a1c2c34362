package wrapper

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

func TestResumeArgv(t *testing.T) {
	cases := []struct {
		name        string
		flag        string
		path        string
		want        []string
		wantErr     bool
		argvChanged bool
	}{
		{"flag and path as two words", "--resume_from_checkpoint {path}", "/ck/c 1.pt",
			[]string{"python3", "train.py", "--resume_from_checkpoint", "/ck/c 1.pt"}, false, true},
		{"path inside a word", "--resume={path}", "/ck/x;rm -rf ~",
			[]string{"python3", "train.py", "--resume=/ck/x;rm -rf ~"}, false, true},
		{"no resume point: nothing appended", "--resume {path}", "",
			[]string{"python3", "train.py"}, false, false},
		{"a word without {path}", "--resume  --ckpt {path}", "/ck/d",
			[]string{"python3", "train.py", "--resume", "--ckpt", "/ck/d"}, false, true},
		{"white space only", "  \t", "/ck/d", nil, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := ParseArgs([]string{"--resume-arg", c.flag, "--", "python3", "train.py"}, func(string) string { return "" }, &bytes.Buffer{})
			if c.wantErr {
				if err == nil {
					t.Fatalf("--resume-arg %q accepted", c.flag)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			orig := slices.Clone(o.Argv)
			got := resumeArgv(o.Argv, o.ResumeArg, c.path)
			if !slices.Equal(got, c.want) {
				t.Errorf("argv %q, want %q", got, c.want)
			}
			if !slices.Equal(o.Argv, orig) {
				t.Errorf("the original argv changed to %q", o.Argv)
			}
		})
	}
}

// An attempt with a resume point runs the command with the --resume-arg
// words, the first attempt (none) without them.
func TestRunAppendsResumeArg(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if err := os.Mkdir(ck, 0o700); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "argv")
	env := map[string]string{"SLURM_JOB_ID": "77", "ISCHED_CLUSTER": "t", "TMPDIR": dir}
	getenv := func(k string) string { return env[k] }
	run := func() []string {
		t.Helper()
		opts, err := ParseArgs([]string{"--no-report", "--checkpoint-dir", ck, "--resume-arg", "--resume_from_checkpoint {path}",
			"--", "/bin/sh", "-c", `printf '%s\n' "$@" > "$0"`, out, "--lr", "0.1"}, getenv, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		if code := Run(context.Background(), opts, Deps{Getenv: getenv, Stdout: &bytes.Buffer{}, Stderr: &stderr}); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	if got := run(); !slices.Equal(got, []string{"--lr", "0.1"}) {
		t.Errorf("first attempt got %q, want no resume arguments", got)
	}
	p := filepath.Join(ck, "checkpoint 100.pt")
	if err := os.WriteFile(p, []byte("weights"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	checkpointSeen(CheckpointEvent{Path: p, Size: fi.Size(), MTime: fi.ModTime()}, &state{ckptSeen: map[string]bool{}}, nil,
		Options{CheckpointDir: ck}, report.JobRef{Lineage: "t-77", JobID: 77}, slog.New(slog.DiscardHandler))
	if got, want := run(), []string{"--lr", "0.1", "--resume_from_checkpoint", p}; !slices.Equal(got, want) {
		t.Errorf("resumed attempt got %q, want %q", got, want)
	}
}
