//go:build integration

package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/agent"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/testutil"
)

// resubmitScript records, per run, the job id, the user it ran as and its
// working directory.
const resubmitScript = `#!/bin/sh
#SBATCH -J isched-slurm-test-agent-resubmit
#SBATCH -p cpu,dev -t 1 -o /dev/null
echo "$SLURM_JOB_ID $(id -un) $(pwd)" >> runs
`

// startScriptAgent starts an agent with a script store (its directory
// returned) on a test cluster, stopped at cleanup.
func startScriptAgent(t *testing.T) (*cluster, *slurm.Client, string) {
	t.Helper()
	c := newCluster(t)
	sc := &slurm.Client{}
	scripts := filepath.Join(t.TempDir(), "scripts")
	a, err := agent.New(agent.Config{Cluster: c.name, PollInterval: time.Second, ScriptDir: scripts}, sc, c.agentClient(t))
	if err != nil {
		t.Fatal(err)
	}
	bg := agent.Start(context.Background(), a)
	t.Cleanup(func() { _ = bg.Close(context.Background()) })
	return c, sc, scripts
}

// TestIntegrationAgentResubmitsForgottenJob: the agent saves the batch
// script of alice's isched job at its first sight; once slurmctld no
// longer holds the job (simulated: the saved record is filed under a job
// id Slurm says is invalid, since MinJobAge is 5 minutes on the dev
// cluster), a resubmit action submits it again as alice, in the job's
// working directory, with its comment (the lineage). Another user's
// resubmit of it is refused.
func TestIntegrationAgentResubmitsForgottenJob(t *testing.T) {
	c, sc, scripts := startScriptAgent(t)

	dir := testutil.WorkDir(t, "isched-slurm-test-agent-resubmit-")
	lineage := fmt.Sprintf("lab-u1001-resubmit-%d", time.Now().UnixNano()%1_000_000)
	comment := (&report.Plan{Lineage: lineage, Ideal: "cpu", Total: 10}).FormatComment()
	job, err := sc.SubmitWith(context.Background(), []byte(resubmitScript), slurm.SubmitSpec{User: "alice", Comment: comment, Chdir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Cancel(context.Background(), job) })
	runs := filepath.Join(dir, "runs")
	saved := filepath.Join(scripts, "job-"+job+".json")
	testutil.Eventually(t, 90*time.Second, 100*time.Millisecond, "job "+job+" ran and its script was saved", func() bool {
		_, err := os.Stat(saved)
		return len(fileLines(runs)) == 1 && err == nil
	})

	// slurmctld forgets the job: its saved record under an id it never had
	const forgotten = "3999999999"
	if _, err := sc.ShowJob(context.Background(), forgotten); !errors.Is(err, slurm.ErrNotFound) {
		t.Fatalf("job %s: %v, want Slurm's invalid job id", forgotten, err)
	}
	b, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec["user"] != "alice" || rec["work_dir"] != dir || rec["comment"] != comment || !strings.HasPrefix(rec["script"].(string), "#!/bin/sh") {
		t.Fatalf("saved record %s", b)
	}
	rec["job_id"], _ = strconv.ParseUint(forgotten, 10, 64)
	b, _ = json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(scripts, "job-"+forgotten+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}

	bob := action(c.name, report.ActionResubmit, "resubmit-bob-"+job, forgotten, "bob", func(a *report.Action) { a.Lineage = lineage })
	c.send(t, bob)
	if r := c.waitResult(t, bob.ID, 30*time.Second); r.Status != report.StatusRefused || !strings.Contains(r.Message, `belongs to "alice", not "bob"`) {
		t.Errorf("bob's resubmit of alice's job: %+v", r)
	}
	act := action(c.name, report.ActionResubmit, "resubmit-"+job, forgotten, "alice", func(a *report.Action) { a.Lineage, a.TimeLimitMin = lineage, 2 })
	start := time.Now()
	c.send(t, act)
	r := c.waitResult(t, act.ID, 60*time.Second)
	if r.Status != report.StatusOK || r.NewJobID == 0 {
		t.Fatalf("resubmit: %+v", r)
	}
	newJob := strconv.FormatUint(r.NewJobID, 10)
	t.Cleanup(func() { _ = sc.Cancel(context.Background(), newJob) })
	testutil.Eventually(t, 90*time.Second, 100*time.Millisecond, "the resubmitted job "+newJob+" ran", func() bool { return len(fileLines(runs)) == 2 })
	t.Logf("resubmitted as job %s: %q after %s; runs %q", newJob, r.Message, time.Since(start).Round(time.Millisecond), fileLines(runs))
	if got, want := fileLines(runs)[1], newJob+" alice "+dir; got != want {
		t.Errorf("the resubmitted job's run: %q, want %q", got, want)
	}
	j, err := sc.ShowJob(context.Background(), newJob)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(j.Comment) != comment || j.User != "alice" || j.TimeLimit == nil || *j.TimeLimit != 2*time.Minute {
		t.Errorf("new job: comment %q user %s time limit %v; want %q, alice, 2m", j.Comment, j.User, j.TimeLimit, comment)
	}
	if rs := c.results(t)[act.ID]; len(rs) != 1 {
		t.Errorf("%d results", len(rs))
	}
}

// privilegedSpellings are the ways a batch script asks for a priority or
// a negative nice that sbatch reads (issue 26, item 6; issue 44, item 1),
// with what Slurm then shows for the job.
var privilegedSpellings = []struct {
	name, lines, want, refusal string
}{
	{"plain", "#SBATCH --nice=-10000\n#SBATCH --priority=4000000\n", "Priority=4000000", "line 3: --nice=-10000; line 4: --priority=4000000"},
	{"double-quoted", "#SBATCH \"--priority=4000000\"\n", "Priority=4000000", "line 3: --priority=4000000"},
	{"single-quoted", "#SBATCH '--nice=-10000'\n", "Nice=-10000", "line 3: --nice=-10000"},
	{"escaped", "#SBATCH --pr\\iority=3000000\n", "Priority=3000000", "line 3: --priority=3000000"},
	{"pbs priority", "#PBS -p -10000\n", "Nice=-10000", "line 3: #PBS -p -10000"},
	{"pbs resource nice", "#PBS -l nice=-9000\n", "Nice=-9000", "line 3: #PBS -l nice=-9000"},
}

// privilegedScript is bob's batch script with the lines of one spelling.
func privilegedScript(lines string) string {
	return "#!/bin/sh\n#SBATCH -J isched-slurm-test-agent-privileged -p cpu -t 1 -o /dev/null\n" + lines + "echo ran >> runs\n"
}

// slurmGrants submits script as root for bob, as the agent does, but
// starting in an hour and without the agent's check, and returns what
// scontrol shows of the job (cancelled at once): each spelling must be one
// Slurm honours, or the refusal below proves nothing.
func slurmGrants(t *testing.T, script, dir string) string {
	t.Helper()
	ctx := context.Background()
	bob, err := user.Lookup("bob")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "sbatch", "--parsable", "--uid=bob", "--gid="+bob.Gid, "--begin=now+3600", "--chdir="+dir)
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch --uid=bob: %v\n%s", err, out)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	defer func() { _ = exec.CommandContext(ctx, "scancel", id).Run() }()
	show, err := exec.CommandContext(ctx, "scontrol", "show", "job", id).CombinedOutput()
	if err != nil {
		t.Fatalf("scontrol show job %s: %v\n%s", id, err, show)
	}
	return string(show)
}

// TestIntegrationResubmitRefusesPrivilegedLinesAsBob (issue 26, item 6;
// issue 44, item 1): the agent resubmits a forgotten job's saved script as
// root for its owner (sbatch --uid), and Slurm honours from root what it
// refuses or ignores from bob: a negative nice, a priority, in every
// spelling sbatch reads (quoted, escaped, #PBS). Each spelling is first
// shown to be granted by this Slurm to a submission by root for bob; then
// bob's saved script with it is refused by the agent, and no job is
// submitted.
func TestIntegrationResubmitRefusesPrivilegedLinesAsBob(t *testing.T) {
	c, sc, scripts := startScriptAgent(t)
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, "the agent's script store", func() bool {
		_, err := os.Stat(scripts)
		return err == nil
	})
	bob, err := user.Lookup("bob")
	if err != nil {
		t.Fatalf("test user bob: %v (scripts/dev-cluster up creates alice and bob)", err)
	}
	bobUID, _ := strconv.Atoi(bob.Uid)
	dir := testutil.WorkDir(t, "isched-slurm-test-agent-privileged-")
	for i, sp := range privilegedSpellings {
		t.Run(sp.name, func(t *testing.T) {
			script := privilegedScript(sp.lines)
			if show := slurmGrants(t, script, dir); !strings.Contains(show, " "+sp.want+" ") && !strings.Contains(show, " "+sp.want+"\n") {
				t.Fatalf("Slurm does not grant %s to root's submission for bob (want %s):\n%s", sp.name, sp.want, show)
			}
			forgotten := strconv.Itoa(3999999900 + i)
			lineage := fmt.Sprintf("lab-u%d-priv-%d-%d", bobUID, i, time.Now().UnixNano()%1_000_000)
			comment := (&report.Plan{Lineage: lineage, Ideal: "cpu", Total: 10}).FormatComment()
			rec := map[string]any{"job_id": 3999999900 + i, "user": "bob", "uid": bobUID, "lineage": lineage, "comment": comment, "work_dir": dir,
				"partition": "cpu", "saved_ms": time.Now().UnixMilli(), "script": script}
			b, _ := json.Marshal(rec)
			if err := os.WriteFile(filepath.Join(scripts, "job-"+forgotten+".json"), b, 0o600); err != nil {
				t.Fatal(err)
			}
			act := action(c.name, report.ActionResubmit, "resubmit-priv-"+lineage, forgotten, "bob", func(a *report.Action) { a.Lineage, a.TimeLimitMin = lineage, 1 })
			c.send(t, act)
			r := c.waitResult(t, act.ID, 30*time.Second)
			if r.Status != report.StatusRefused || !strings.Contains(r.Message, "("+sp.refusal+")") || r.NewJobID != 0 {
				t.Fatalf("bob's resubmit with %s: %+v, want refused naming %q", sp.name, r, sp.refusal)
			}
			jobs, err := sc.Jobs(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				if strings.TrimSpace(j.Comment) == comment {
					t.Errorf("a job was submitted for bob's lineage: %d %s", j.JobID, j.State)
				}
			}
			t.Logf("refused: %s", r.Message)
		})
	}
}
