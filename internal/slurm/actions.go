package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/report"
)

// ShowJob returns the job's current record (`scontrol show job -o ID`).
// An id slurmctld does not know (never existed, or ended more than MinJobAge
// ago) is an error matching ErrNotFound.
func (c *Client) ShowJob(ctx context.Context, jobID string) (*JobInfo, error) {
	if err := checkJobID(jobID); err != nil {
		return nil, err
	}
	out, err := c.run(ctx, or(c.Scontrol, "scontrol"), []string{"show", "job", "--oneliner", jobID}, nil)
	if err != nil {
		return nil, err
	}
	jobs, err := ParseShowJob(out)
	if err != nil {
		return nil, err
	}
	// An array's job id prints every task; pick the record asked for.
	for i := range jobs {
		if jobs[i].JobID == jobID || jobs[i].ID() == jobID {
			return &jobs[i], nil
		}
	}
	if len(jobs) == 1 {
		return &jobs[0], nil
	}
	return nil, fmt.Errorf("scontrol show job %s: no record for the job in %d lines: %w", jobID, len(jobs), ErrNotFound)
}

// Signal sends sig (a name such as "USR1" or "SIGUSR1") to a job:
// `scancel --signal=SIG --batch JOB` reaches the batch shell only (where
// isched-wrapper runs); otherwise `--full` reaches the batch shell and every
// step. (Without either flag scancel signals the steps only, not the batch
// shell.)
func (c *Client) Signal(ctx context.Context, jobID, sig string, batchOnly bool) error {
	if err := checkJobID(jobID); err != nil {
		return err
	}
	name := strings.TrimPrefix(strings.ToUpper(sig), "SIG")
	if !signalRE.MatchString(name) {
		return fmt.Errorf("%w: signal %q", ErrInvalid, sig)
	}
	scope := "--full"
	if batchOnly {
		scope = "--batch"
	}
	_, err := c.run(ctx, or(c.Scancel, "scancel"), []string{"--signal=" + name, scope, jobID}, nil)
	return err
}

// Cancel cancels a job (`scancel JOB`). Note that scancel exits 0 for an
// unknown or already ended job: check ShowJob first when that matters.
func (c *Client) Cancel(ctx context.Context, jobID string) error {
	if err := checkJobID(jobID); err != nil {
		return err
	}
	_, err := c.run(ctx, or(c.Scancel, "scancel"), []string{jobID}, nil)
	return err
}

// Requeue requeues a running (or ended, while its record lasts) job:
// `scontrol requeue JOB`, or `requeuehold` to keep it held until Release.
// The batch script runs again from the start with SLURM_RESTART_COUNT+1,
// same job id; Slurm delays the restart by the credential lifetime
// (cred_expire+1 s).
func (c *Client) Requeue(ctx context.Context, jobID string, hold bool) error {
	if err := checkJobID(jobID); err != nil {
		return err
	}
	verb := "requeue"
	if hold {
		verb = "requeuehold"
	}
	_, err := c.run(ctx, or(c.Scontrol, "scontrol"), []string{verb, jobID}, nil)
	return err
}

// Release releases a held job (`scontrol release JOB`).
func (c *Client) Release(ctx context.Context, jobID string) error {
	if err := checkJobID(jobID); err != nil {
		return err
	}
	_, err := c.run(ctx, or(c.Scontrol, "scontrol"), []string{"release", jobID}, nil)
	return err
}

// Hold holds a pending job (`scontrol hold JOB`).
func (c *Client) Hold(ctx context.Context, jobID string) error {
	if err := checkJobID(jobID); err != nil {
		return err
	}
	_, err := c.run(ctx, or(c.Scontrol, "scontrol"), []string{"hold", jobID}, nil)
	return err
}

// UpdateSpec is what `scontrol update JobId=J ...` changes; zero fields are
// left alone. Slurm 22.05 accepts Partition and Gres only while the job is
// pending ("Job is no longer pending execution" otherwise); TimeLimit also on
// a running job, but only root, SlurmUser or an operator may raise it.
type UpdateSpec struct {
	Partition string        // "gpu", or a list "gpu,gpu-dev"
	Gres      string        // per-node GRES: "gpu:1", "gpu:a100:2"; a "gres:"/"gres/" prefix is accepted
	TimeLimit time.Duration // rounded up to whole minutes
	// CPUsPerTask (MinCPUsNode follows it, times the tasks per node of a
	// resize: Slurm 22.05 keeps the old CPU count per node otherwise,
	// measured); 0: unchanged. See CPUsFor.
	CPUsPerTask int
	// Tasks resizes the job (NumTasks) onto Nodes nodes (NumNodes=N-N;
	// 0: one node), Tasks/Nodes on each; 0: the size is unchanged. Slurm
	// 22.05 takes both on a pending job (testdata/README.md, "Resizing a
	// job").
	Tasks, Nodes int
	StartTime    time.Time // absolute earliest start (UTC)
	// StartIn sets StartTime=now+N seconds on the controller's clock, which
	// avoids clock skew between this host and slurmctld.
	StartIn time.Duration
	// Nice sets the job's nice value (Nice=; a negative one only as root
	// or a Slurm operator); nil: unchanged.
	Nice *int64
}

// maxNice is Slurm's bound on a nice value (NICE_OFFSET - 3).
const maxNice = 2147483645

func (u UpdateSpec) empty() bool {
	return u.Partition == "" && u.Gres == "" && u.TimeLimit == 0 && u.CPUsPerTask == 0 && u.Tasks == 0 && u.Nodes == 0 &&
		u.StartTime.IsZero() && u.StartIn == 0 && u.Nice == nil
}

// sizeArgs are the size and CPU keys of an update: NumNodes=N-N
// NumTasks=T, then CPUsPerTask=C MinCPUsNode=C*T/N. NumNodes is written as
// a range: 22.05 refuses "NumNodes=2" for a job submitted with --nodes=1
// ("Node count specification invalid"), and takes "2-2".
func (u UpdateSpec) sizeArgs() ([]string, error) {
	var out []string
	perNode := 1
	switch {
	case u.Tasks < 0 || u.Tasks > report.MaxElastic:
		return nil, fmt.Errorf("%w: tasks %d", ErrInvalid, u.Tasks)
	case u.Nodes != 0 && u.Tasks == 0:
		return nil, fmt.Errorf("%w: nodes %d without tasks", ErrInvalid, u.Nodes)
	case u.Tasks != 0:
		nodes := max(u.Nodes, 1)
		if u.Nodes < 0 || u.Tasks%nodes != 0 {
			return nil, fmt.Errorf("%w: %d tasks on %d nodes: want the same tasks on every node", ErrInvalid, u.Tasks, u.Nodes)
		}
		n := strconv.Itoa(nodes)
		out = append(out, "NumNodes="+n+"-"+n, "NumTasks="+strconv.Itoa(u.Tasks))
		perNode = u.Tasks / nodes
	}
	if u.CPUsPerTask != 0 {
		if u.CPUsPerTask < 0 || u.CPUsPerTask > maxCPUs || u.CPUsPerTask*perNode > maxCPUs {
			return nil, fmt.Errorf("%w: CPUs per task %d (%d tasks per node)", ErrInvalid, u.CPUsPerTask, perNode)
		}
		out = append(out, "CPUsPerTask="+strconv.Itoa(u.CPUsPerTask), "MinCPUsNode="+strconv.Itoa(u.CPUsPerTask*perNode))
	}
	return out, nil
}

// args renders the spec as scontrol update arguments, validating each value
// (argv elements cannot split, but a value must still not smuggle a second
// Key=Value into scontrol's own parser).
func (u UpdateSpec) args() ([]string, error) {
	var out []string
	if u.Partition != "" {
		if !partRE.MatchString(u.Partition) {
			return nil, fmt.Errorf("%w: partition %q", ErrInvalid, u.Partition)
		}
		out = append(out, "Partition="+u.Partition)
	}
	if u.Gres != "" {
		g := JobGres(u.Gres, "")
		if !gresRE.MatchString(g) || strings.ContainsAny(g, "=") {
			return nil, fmt.Errorf("%w: gres %q", ErrInvalid, u.Gres)
		}
		// Gres= is spelled the same in 22.05 and 23.x (TresPerNode wants
		// "gres:gpu:1" in 22.05 but "gres/gpu:1" later).
		out = append(out, "Gres="+g)
	}
	if u.TimeLimit != 0 {
		if u.TimeLimit < 0 {
			return nil, fmt.Errorf("%w: time limit %s", ErrInvalid, u.TimeLimit)
		}
		min := int64((u.TimeLimit + time.Minute - 1) / time.Minute)
		out = append(out, "TimeLimit="+strconv.FormatInt(min, 10))
	}
	size, err := u.sizeArgs()
	if err != nil {
		return nil, err
	}
	out = append(out, size...)
	if u.Nice != nil {
		if *u.Nice > maxNice || *u.Nice < -maxNice {
			return nil, fmt.Errorf("%w: nice %d", ErrInvalid, *u.Nice)
		}
		out = append(out, "Nice="+strconv.FormatInt(*u.Nice, 10))
	}
	switch {
	case !u.StartTime.IsZero() && u.StartIn != 0:
		return nil, fmt.Errorf("%w: StartTime and StartIn both set", ErrInvalid)
	case !u.StartTime.IsZero():
		out = append(out, "StartTime="+u.StartTime.UTC().Format("2006-01-02T15:04:05"))
	case u.StartIn < 0:
		return nil, fmt.Errorf("%w: StartIn %s", ErrInvalid, u.StartIn)
	case u.StartIn != 0:
		out = append(out, "StartTime=now+"+strconv.FormatInt(int64((u.StartIn+time.Second-1)/time.Second), 10))
	}
	return out, nil
}

// Update changes a job with one `scontrol update JobId=J ...` call.
func (c *Client) Update(ctx context.Context, jobID string, u UpdateSpec) error {
	if err := checkJobID(jobID); err != nil {
		return err
	}
	if u.empty() {
		return fmt.Errorf("%w: empty update", ErrInvalid)
	}
	kv, err := u.args()
	if err != nil {
		return err
	}
	_, err = c.run(ctx, or(c.Scontrol, "scontrol"), append([]string{"update", "JobId=" + jobID}, kv...), nil)
	return err
}

// SetAdminComment writes a job's AdminComment (`scontrol update JobId=J
// AdminComment=...`, one argument, no shell). Only root and Slurm operators
// may; Slurm refuses it once the job has finished.
func (c *Client) SetAdminComment(ctx context.Context, jobID, text string) error {
	if err := checkJobID(jobID); err != nil {
		return err
	}
	if strings.ContainsAny(text, "\n\r\x00") || len(text) > 1024 {
		return fmt.Errorf("%w: admin comment must be one line of at most 1024 bytes", ErrInvalid)
	}
	_, err := c.run(ctx, or(c.Scontrol, "scontrol"), []string{"update", "JobId=" + jobID, "AdminComment=" + text}, nil)
	return err
}

// SubmitSpec says how to submit a batch script. Everything not set here
// comes from the script's #SBATCH lines; command-line options override them.
type SubmitSpec struct {
	// User submits as that user (`--uid`, and `--gid` of the user's primary
	// group; root or SlurmUser only). Empty: as ourselves.
	User      string
	Partition string
	Gres      string        // per node, "gpu:1"
	TimeLimit time.Duration // rounded up to whole minutes
	// CPUsPerTask is `--cpus-per-task` (over the script's); 0: the
	// script's own.
	CPUsPerTask int
	Hold        bool   // submit held (`--hold`)
	Comment     string // `--comment`, replaces the script's
	// Chdir is the job's working directory (`--chdir`, absolute); empty:
	// the script's #SBATCH --chdir, else the submitter's.
	Chdir string
	// Env are SBATCH_* variables ("SBATCH_ACCOUNT=physics") passed to
	// sbatch, which the runner otherwise strips: the user's own, which
	// beat the script's #SBATCH lines. Refused: other names, control
	// characters.
	Env []string
	// Cluster submits to another cluster of the same slurmdbd (`sbatch
	// --clusters`, Slurm's multi-cluster operation); empty: this one.
	Cluster string
	// IgnorePBS passes --ignore-pbs: sbatch reads no #PBS or #BSUB lines.
	IgnorePBS bool
	// ArrayTask submits the script as an array of that one task
	// (`--array=N`, over the script's own #SBATCH --array): an element of
	// an array submitted again keeps its SLURM_ARRAY_TASK_ID, hence its
	// lineage and checkpoint directory. nil: not an array.
	ArrayTask *int
}

// SubmitWith submits a batch script read from stdin (`sbatch --parsable`)
// and returns the new job id. The job gets the user's login environment,
// never ours (`--export=NONE`, also when User is empty).
func (c *Client) SubmitWith(ctx context.Context, script []byte, spec SubmitSpec) (string, error) {
	if len(script) == 0 || !strings.HasPrefix(string(script), "#!") {
		return "", fmt.Errorf("%w: batch script must start with \"#!\"", ErrInvalid)
	}
	args, err := c.sbatchArgs(spec)
	if err != nil {
		return "", err
	}
	out, err := c.runEnv(ctx, or(c.Sbatch, "sbatch"), args, script, spec.Env)
	if err != nil {
		return "", err
	}
	// --parsable prints "id" or "id;cluster".
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if !ValidJobID(id) {
		return "", fmt.Errorf("sbatch --parsable: want a job id, got %q", strings.TrimSpace(string(out)))
	}
	return id, nil
}

// sbatchArgs are sbatch's options for spec, each checked in turn; the
// first that is invalid is the error.
func (c *Client) sbatchArgs(spec SubmitSpec) ([]string, error) {
	args := []string{"--parsable", "--export=NONE"}
	if spec.User != "" {
		ua, err := c.userArgs(spec.User)
		if err != nil {
			return nil, err
		}
		args = append(args, ua...)
	}
	for _, opt := range sbatchOptions {
		a, err := opt(spec)
		if err != nil {
			return nil, err
		}
		if a != "" {
			args = append(args, a)
		}
	}
	for _, kv := range spec.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !sbatchEnvRE.MatchString(k) || strings.ContainsFunc(v, isControl) {
			return nil, fmt.Errorf("%w: sbatch environment %q: want SBATCH_NAME=value without control characters", ErrInvalid, kv)
		}
	}
	return args, nil
}

// userArgs submit as asUser, with the user's own primary group.
func (c *Client) userArgs(asUser string) ([]string, error) {
	if !userRE.MatchString(asUser) {
		return nil, fmt.Errorf("%w: user %q", ErrInvalid, asUser)
	}
	// --uid alone keeps the submitter's group: measured on 22.05, a job
	// submitted by root with --uid=alice ran as "uid=1001(alice)
	// gid=0(root) groups=0(root),1001(alice)". Always pass the user's
	// own primary group.
	lookup := c.LookupGroup
	if lookup == nil {
		lookup = primaryGroup
	}
	gid, err := lookup(asUser)
	if err != nil {
		return nil, fmt.Errorf("%w: user %q: %w", ErrInvalid, asUser, err)
	}
	if !isDigits(gid) {
		return nil, fmt.Errorf("%w: user %q: primary group %q is not a number", ErrInvalid, asUser, gid)
	}
	return []string{"--uid=" + asUser, "--gid=" + gid}, nil
}

// sbatchOptions turn one field of a SubmitSpec into an sbatch option
// ("" when unset), in the order sbatchArgs checks and passes them.
var sbatchOptions = []func(SubmitSpec) (string, error){
	func(s SubmitSpec) (string, error) {
		return checked(s.Partition, partRE.MatchString(s.Partition), "--partition="+s.Partition, "partition %q", s.Partition)
	},
	func(s SubmitSpec) (string, error) {
		g := JobGres(s.Gres, "")
		return checked(s.Gres, gresRE.MatchString(g) && !strings.Contains(g, "="), "--gres="+g, "gres %q", s.Gres)
	},
	func(s SubmitSpec) (string, error) {
		if s.TimeLimit < 0 {
			return "", fmt.Errorf("%w: time limit %s", ErrInvalid, s.TimeLimit)
		}
		if s.TimeLimit == 0 {
			return "", nil
		}
		return "--time=" + strconv.FormatInt(int64((s.TimeLimit+time.Minute-1)/time.Minute), 10), nil
	},
	func(s SubmitSpec) (string, error) {
		if s.CPUsPerTask < 0 {
			return "", fmt.Errorf("%w: cpus per task %d", ErrInvalid, s.CPUsPerTask)
		}
		if s.CPUsPerTask == 0 {
			return "", nil
		}
		return "--cpus-per-task=" + strconv.Itoa(s.CPUsPerTask), nil
	},
	func(s SubmitSpec) (string, error) { return flagIf(s.Hold, "--hold"), nil },
	func(s SubmitSpec) (string, error) { return flagIf(s.IgnorePBS, "--ignore-pbs"), nil },
	func(s SubmitSpec) (string, error) {
		if s.ArrayTask == nil {
			return "", nil
		}
		if *s.ArrayTask < 0 {
			return "", fmt.Errorf("%w: array task %d", ErrInvalid, *s.ArrayTask)
		}
		return "--array=" + strconv.Itoa(*s.ArrayTask), nil
	},
	func(s SubmitSpec) (string, error) {
		return checked(s.Cluster, clusterRE.MatchString(s.Cluster), "--clusters="+s.Cluster, "cluster %q", s.Cluster)
	},
	func(s SubmitSpec) (string, error) {
		ok := !strings.ContainsAny(s.Comment, "\x00\n") && len(s.Comment) <= 1024
		return checked(s.Comment, ok, "--comment="+s.Comment, "comment %q", s.Comment)
	},
	func(s SubmitSpec) (string, error) {
		ok := filepath.IsAbs(s.Chdir) && !strings.ContainsFunc(s.Chdir, isControl) && len(s.Chdir) <= 4096
		return checked(s.Chdir, ok, "--chdir="+s.Chdir, "working directory %q: want an absolute path without control characters", s.Chdir)
	},
}

// checked is arg when value is set and ok, "" when value is unset, and an
// ErrInvalid naming it (format, value) when it is set and not ok.
func checked(value string, ok bool, arg, format, v string) (string, error) {
	switch {
	case value == "":
		return "", nil
	case !ok:
		return "", fmt.Errorf("%w: "+format, ErrInvalid, v)
	}
	return arg, nil
}

// flagIf is flag when on, else "".
func flagIf(on bool, flag string) string {
	if on {
		return flag
	}
	return ""
}

// isControl reports an ASCII control character.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// MaxBatchScript bounds a batch script BatchScript returns (Slurm's own
// default limit, max_script_size, is 4 MiB).
const MaxBatchScript = 4 << 20

// maxCPUs bounds a CPUs-per-task update (report.MaxCPUs).
const maxCPUs = 1 << 16

// BatchScript returns the batch script of a job slurmctld still holds
// (`scontrol write batch_script <id> -`, Slurm 22.05: also after the job
// ended, until MinJobAge); an error matching ErrNotFound when it no longer
// holds the job, ErrInvalid when the job has no batch script (an
// interactive allocation) or it is larger than MaxBatchScript.
func (c *Client) BatchScript(ctx context.Context, jobID string) ([]byte, error) {
	if !ValidJobID(jobID) {
		return nil, fmt.Errorf("%w: job id %q", ErrInvalid, jobID)
	}
	out, err := c.run(ctx, or(c.Scontrol, "scontrol"), []string{"write", "batch_script", jobID, "-"}, nil)
	if err != nil {
		return nil, err
	}
	switch {
	case len(out) > MaxBatchScript:
		return nil, fmt.Errorf("%w: job %s: batch script of %d bytes (at most %d)", ErrInvalid, jobID, len(out), MaxBatchScript)
	case !bytes.HasPrefix(out, []byte("#!")):
		return nil, fmt.Errorf("%w: job %s: no batch script (%q)", ErrInvalid, jobID, firstLine(out))
	}
	return out, nil
}

func firstLine(b []byte) string {
	l, _, _ := bytes.Cut(b, []byte("\n"))
	if len(l) > 200 {
		l = l[:200]
	}
	return string(l)
}

// ClusterName returns Slurm's ClusterName (`scontrol show config`).
func (c *Client) ClusterName(ctx context.Context) (string, error) {
	out, err := c.run(ctx, or(c.Scontrol, "scontrol"), []string{"show", "config"}, nil)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "ClusterName" {
			if name := strings.TrimSpace(v); name != "" {
				return name, nil
			}
		}
	}
	return "", fmt.Errorf("scontrol show config: no ClusterName")
}

// MoveSpec says where a job goes. Partition, Gres and TimeLimit are applied
// with one update while the job is pending; all empty is a plain requeue
// (still restarted fast unless SlowStart).
type MoveSpec struct {
	Partition string
	Gres      string
	TimeLimit time.Duration
	// CPUsPerTask on the new partition (see CPUsFor: a job of several
	// tasks that is not resized keeps its CPUs, MoveResult.CPUsKept); 0:
	// unchanged, or for a resize the job's own.
	CPUsPerTask int
	// Tasks and Nodes resize the job (UpdateSpec): the next attempt runs
	// Tasks tasks on Nodes nodes (0: one); 0: the size is unchanged.
	Tasks, Nodes int
	// Hold leaves the job held after the update (the caller releases it).
	Hold bool
	// SlowStart keeps Slurm's own restart delay (cred_expire+1 s) instead of
	// setting StartTime=now+2 once the job is pending.
	SlowStart bool
	// Ended also requeues a job that has ended (COMPLETED, FAILED,
	// TIMEOUT, PREEMPTED, NODE_FAIL, ...; never CANCELLED): Slurm 22.05's
	// requeue takes a finished batch job back to PENDING while slurmctld
	// still holds its record (MinJobAge), same job id, restart count + 1.
	Ended bool
	// Settle bounds the wait for the requeued job to leave COMPLETING (a job
	// that ignores SIGTERM holds on until KillWait); default 2 min.
	Settle time.Duration
}

// MoveResult says what Move did.
type MoveResult struct {
	From, To  string        // partitions
	Requeued  bool          // false when the job was already pending
	Restarts  int           // Slurm's restart count after the requeue
	Pending   time.Duration // requeue until the job was PENDING
	Total     time.Duration // until Move returned
	Released  bool
	UpdateErr error // set when the update failed and the job was released unchanged
	// Restored: a resize failed and its size before the move was set
	// again (restoreSpec).
	Restored bool
	// CPUsKept: the spec's CPUs per task were not applied, the job has
	// several tasks (its CPU count is theirs to split).
	CPUsKept bool
	// CPUsPerTask the update set (0: none): the spec's, or for a resize
	// without them the job's own.
	CPUsPerTask int
	// FromTasks, FromNodes: the job's size before the move.
	FromTasks, FromNodes int
}

// CPUsFor is the CPUs per task an update of job j (nil: unknown) sets when
// cpus are asked for (0: none) and the job is resized to tasks (0: not):
//
//   - a resize always sets them, cpus or else the job's own (at least 1),
//     because MinCPUsNode must follow the new tasks per node: Slurm 22.05
//     keeps a job's CPU count per node when only NumTasks changes
//     (measured: NumTasks=2 left NumCPUs=1, and two ranks would share one
//     CPU), and keeps NumCPUs of a larger size when it shrinks;
//   - a job of several tasks that is not resized keeps its CPUs (kept):
//     how its tasks lie on its nodes is not known here;
//   - else cpus (a one-task job: MinCPUsNode = cpus).
func CPUsFor(j *JobInfo, cpus, tasks int) (n int, kept bool) {
	switch {
	case tasks != 0 && cpus == 0 && j != nil:
		return max(j.CPUsPerTask(), 1), false
	case tasks != 0:
		return cpus, false
	case cpus != 0 && j != nil && j.Tasks() > 1:
		return 0, true
	}
	return cpus, false
}

// ErrState is matched by Move and the agent when a job's state does not
// allow the operation (ended, suspended, ...).
var ErrState = errors.New("slurm: job state does not allow this")

// Move migrates a job to another partition/GRES/time limit, keeping its job
// id. This is the sequence measured on Slurm 22.05 (testdata/README.md):
//
//  1. `scontrol requeuehold J` (a running job): the batch shell gets SIGTERM;
//     the job is COMPLETING, then PENDING, held, Restarts+1. Holding keeps it
//     from starting again where it was before the update lands.
//  2. wait until `scontrol show job` says PENDING: an update sent while the
//     job is still COMPLETING returns 0 but its StartTime is overwritten when
//     the requeue completes.
//  3. `scontrol update JobId=J Partition=P Gres=G TimeLimit=M StartTime=now+2`
//     in one call (Partition/Gres are refused on a running job). StartTime
//     replaces the requeue's BeginTime (now+cred_expire+1), so the job
//     restarts in ~2 s instead of ~6 s here (cred_expire=5) or ~121 s with
//     Slurm's default cred_expire. Not StartTime=now: a start in the same
//     second as the credential revoke killed the job ("Job credential
//     revoked").
//  4. `scontrol release J` (unless Hold).
//
// A pending job is held (unless it already is) instead of 1-2, and released
// after the update only if Move held it. If the update fails (bad partition, ...) the
// job is released, so it is never left held by a half-done move; the result
// says so and Move returns the update's error. Unchanged as far as the
// refused key goes: slurmctld applies the keys it takes before the one it
// refuses (measured on 22.05: "NumNodes=2 NumTasks=4 Gres=gpu:2
// CPUsPerTask=2 MinCPUsNode=4" refused with "Node count specification
// invalid" still set CPUs/Task=2 and MinCPUsNode=4).
//
// With spec.Tasks the update resizes the job (UpdateSpec.sizeArgs): the
// allocation of the next attempt is the new size, and Slurm sets
// SLURM_NTASKS and SLURM_NPROCS from it, unless the job's environment
// already holds them: sbatch --ntasks (or #SBATCH --ntasks) freezes them
// at submission, and a bare srun then starts the old count (measured,
// testdata/README.md).
func (c *Client) Move(ctx context.Context, jobID string, spec MoveSpec) (MoveResult, error) {
	start := time.Now()
	var res MoveResult
	upd := UpdateSpec{Partition: spec.Partition, Gres: spec.Gres, TimeLimit: spec.TimeLimit, CPUsPerTask: spec.CPUsPerTask,
		Tasks: spec.Tasks, Nodes: spec.Nodes}
	placement := !upd.empty()
	if _, err := upd.args(); err != nil {
		return res, err
	}
	if !spec.SlowStart {
		upd.StartIn = 2 * time.Second
	}
	j, err := c.ShowJob(ctx, jobID)
	if err != nil {
		return res, err
	}
	upd.CPUsPerTask, res.CPUsKept = CPUsFor(j, spec.CPUsPerTask, spec.Tasks)
	res.CPUsPerTask = upd.CPUsPerTask
	res.From, res.Restarts, res.FromTasks, res.FromNodes = j.Partition, j.Restarts, j.Tasks(), j.Nodes()
	weHeld, err := c.stop(ctx, jobID, j, spec, placement, start, &res)
	if err != nil {
		return res, err
	}
	release := weHeld && !spec.Hold
	if upd.empty() {
		// A plain requeue kept held (SlowStart, Hold): nothing to update.
	} else if err := c.Update(ctx, jobID, upd); err != nil {
		res.UpdateErr = err
		if upd.Tasks != 0 {
			err = c.restoreSize(ctx, jobID, j, upd, &res, err)
		}
		err = c.undo(ctx, jobID, spec, release, &res, err)
		res.Total = time.Since(start)
		return res, err
	}
	res.To = spec.Partition
	if res.To == "" {
		res.To = res.From
	}
	if release {
		if err := c.Release(ctx, jobID); err != nil {
			res.Total = time.Since(start)
			return res, err
		}
		res.Released = true
	}
	res.Total = time.Since(start)
	return res, nil
}

// stop keeps the job j from running where it is for the rest of a move: a
// running job (or, with spec.Ended, an ended one that was not cancelled) is
// requeued held, a pending one is held unless it already is. It reports
// whether Move holds the job now.
func (c *Client) stop(ctx context.Context, jobID string, j *JobInfo, spec MoveSpec, placement bool, start time.Time, res *MoveResult) (bool, error) {
	switch {
	case j.State == StateRunning || spec.Ended && j.Ended() && j.State != StateCancelled:
		if err := c.Requeue(ctx, jobID, true); err != nil {
			return false, err
		}
		res.Requeued = true
		j, err := c.waitPending(ctx, jobID, spec.Settle)
		if err != nil {
			return true, err
		}
		res.Pending = time.Since(start)
		res.Restarts = j.Restarts
		return true, nil
	case j.State == StatePending && !placement:
		return false, fmt.Errorf("requeue job %s: it is pending, not running, and nothing is to change: %w", jobID, ErrState)
	case j.State == StatePending && !j.Held():
		// Hold it so it cannot start where it is in the middle of the move.
		if err := c.Hold(ctx, jobID); err != nil {
			return false, err
		}
		return true, nil
	case j.State == StatePending:
		// Held by someone else: move it, leave the hold alone.
		return false, nil
	}
	return false, fmt.Errorf("move job %s: state %s: %w", jobID, j.State, ErrState)
}

// restoreSize puts a job whose resize failed back to its size before
// the move (j): slurmctld applies an update's keys in turn and keeps
// those it took before the one it refused, so a refused resize can leave
// a job half resized (GRES of the new size, tasks of the old). It returns
// the update's error, with the restore's when that failed too.
func (c *Client) restoreSize(ctx context.Context, jobID string, j *JobInfo, upd UpdateSpec, res *MoveResult, err error) error {
	if rerr := c.Update(ctx, jobID, restoreSpec(j, upd)); rerr != nil {
		return errors.Join(err, fmt.Errorf("restoring its size after the failed update: %w", rerr))
	}
	res.Restored = true
	return err
}

// restoreSpec is the update that gives job j back, of what resize upd
// changes, the values j had: its partition, GRES per node, tasks, nodes
// and CPUs per task.
func restoreSpec(j *JobInfo, upd UpdateSpec) UpdateSpec {
	r := UpdateSpec{Tasks: j.Tasks(), Nodes: j.Nodes(), CPUsPerTask: max(j.CPUsPerTask(), 1)}
	if upd.Partition != "" {
		r.Partition = j.Partition
	}
	if upd.Gres != "" {
		r.Gres = JobGres(j.TresPerNode, j.TresPerJob)
	}
	return r
}

// undo releases a job whose update failed, unchanged, when Move holds it
// (release), and returns the update's error with the release's.
func (c *Client) undo(ctx context.Context, jobID string, spec MoveSpec, release bool, res *MoveResult, err error) error {
	if release && !spec.SlowStart && res.Requeued {
		// Best effort: restart where it was without the requeue's delay.
		_ = c.Update(ctx, jobID, UpdateSpec{StartIn: 2 * time.Second})
	}
	if release {
		if rerr := c.Release(ctx, jobID); rerr == nil {
			res.Released = true
		} else {
			err = errors.Join(err, fmt.Errorf("release after failed update: %w", rerr))
		}
	}
	return err
}

// waitPending polls until the job is PENDING (past COMPLETING).
func (c *Client) waitPending(ctx context.Context, jobID string, limit time.Duration) (*JobInfo, error) {
	if limit <= 0 {
		limit = 2 * time.Minute
	}
	poll := c.PollEvery
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(poll)
	defer t.Stop()
	last := ""
	for {
		j, err := c.ShowJob(ctx, jobID)
		if err == nil {
			if j.State == StatePending {
				return j, nil
			}
			if j.Ended() {
				return nil, fmt.Errorf("job %s ended (%s) while being requeued: %w", jobID, j.State, ErrState)
			}
			last = j.State
		} else if ctx.Err() == nil && errors.Is(err, ErrNotFound) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("job %s still %s %s after requeue: %w", jobID, last, limit, ctx.Err())
		case <-t.C:
		}
	}
}

// primaryGroup returns the numeric primary group of a user (passwd/NSS).
func primaryGroup(name string) (string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return "", err
	}
	return u.Gid, nil
}
