package wrapper

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestDistEnv(t *testing.T) {
	t.Parallel()
	step := map[string]string{
		"SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
		"SLURM_STEP_NODELIST": "gpu[3-4]", "SLURM_JOB_NODELIST": "gpu[1-4]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "123456",
	}
	with := func(kv ...string) func(string) string {
		m := map[string]string{}
		for k, v := range step {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	all := [][2]string{{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "gpu3"}, {"MASTER_PORT", "23456"}}
	for _, c := range []struct {
		name   string
		getenv func(string) string
		want   [][2]string
		err    string
	}{
		{"a rank of a two-node step", with(), all, ""},
		{"one task: nothing", with("SLURM_NTASKS", "1"), nil, ""},
		{"not in a step", func(string) string { return "" }, nil, ""},
		{"the user's own MASTER_PORT and RANK stay", with("MASTER_PORT", "29500", "RANK", "0"),
			[][2]string{{"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "gpu3"}}, ""},
		{"the job's node list without a step's", with("SLURM_STEP_NODELIST", ""),
			[][2]string{{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "gpu1"}, {"MASTER_PORT", "23456"}}, ""},
		{"a bad node list", with("SLURM_STEP_NODELIST", "[1-2]"), nil, "SLURM_STEP_NODELIST"},
		{"a bad job id", with("SLURM_JOB_ID", "x"), nil, "SLURM_JOB_ID"},
	} {
		got, err := distEnv(c.getenv)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestFirstHostAndTasksHere(t *testing.T) {
	t.Parallel()
	for list, want := range map[string]string{"gpu[3-4,7],cpu1": "gpu3", "node[007-009]": "node007", "login": "login", "a,b": "a", "cpu1,gpu[1-2]": "cpu1"} {
		if got, err := firstHost(list); err != nil || got != want {
			t.Errorf("firstHost(%q) = %q, %v; want %q", list, got, err, want)
		}
	}
	for _, bad := range []string{"", "[1-2]", " "} {
		if _, err := firstHost(bad); err == nil {
			t.Errorf("firstHost(%q): no error", bad)
		}
	}
	for _, c := range []struct{ per, node, want string }{
		{"2(x3),1", "0", "2"}, {"2(x3),1", "2", "2"}, {"2(x3),1", "3", "1"}, {"2(x3),1", "4", ""}, {"4", "0", "4"}, {"x", "0", ""}, {"2(xz)", "0", ""}, {"2", "", ""},
	} {
		if got := tasksHere(c.per, c.node); got != c.want {
			t.Errorf("tasksHere(%q, %q) = %q, want %q", c.per, c.node, got, c.want)
		}
	}
}

// TestDistEnvReachesTheChild: rank 1 of a two-task step on one node runs
// its command with torchrun's variables, and the user's own MASTER_PORT.
func TestDistEnvReachesTheChild(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	env := map[string]string{"SLURM_JOB_ID": "777", "SLURM_CLUSTER_NAME": "lab", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": strconv.Itoa(os.Getuid()),
		"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "2",
		"SLURM_STEP_NODELIST": "cpu1", "SLURM_JOB_PARTITION": "cpu", "SLURMD_NODENAME": "cpu1", "SLURM_STEP_ID": "0", "TMPDIR": tmp, "MASTER_PORT": "29511"}
	getenv := func(k string) string { return env[k] }
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	out := filepath.Join(tmp, "seen")
	opts, err := ParseArgs([]string{"--lineage", "lab-777", "--", "/bin/sh", "-c",
		`printf '%s %s %s %s %s %s' "$RANK" "$WORLD_SIZE" "$LOCAL_RANK" "$LOCAL_WORLD_SIZE" "$MASTER_ADDR" "$MASTER_PORT" > "$0"`, out}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := Run(context.Background(), opts, Deps{
		Getenv: getenv, Environ: func() []string { return environ }, Stdout: &bytes.Buffer{}, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler),
		Connect: func(context.Context, string) (appender, error) { return &endSink{}, nil },
	})
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	if b, _ := os.ReadFile(out); string(b) != "1 2 1 2 cpu1 29511" {
		t.Errorf("the child saw %q, want \"1 2 1 2 cpu1 29511\"", b)
	}
}
