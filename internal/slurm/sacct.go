package slurm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// AcctJob is one job as Slurm's accounting (slurmdbd) keeps it, also long
// after slurmctld forgot it (MinJobAge): its last run (a requeued job's
// earlier runs are not listed), its comment (AccountingStoreFlags=
// job_comment) and its AdminComment, where the coordinator writes the run's
// efficiency verdict.
type AcctJob struct {
	JobID, User, State, Partition string
	UID                           int
	Elapsed                       time.Duration
	ExitCode                      string // "0:0": status:signal
	Comment, AdminComment         string
}

// acctSep separates sacct's fields: the two comments are free text that may
// hold sacct's default '|'.
const acctSep = "\x1f"

var acctFields = []string{"JobID", "User", "UID", "State", "Partition", "ElapsedRaw", "ExitCode", "Comment", "AdminComment"}

// AcctJob reads job jobID from Slurm's accounting (sacct). ErrNotFound: the
// accounting has no such job; another error: no accounting to ask (sacct
// fails without slurmdbd).
func (c *Client) AcctJob(ctx context.Context, jobID string) (*AcctJob, error) {
	if !ValidJobID(jobID) {
		return nil, fmt.Errorf("sacct: %q is not a job id", jobID)
	}
	b, err := c.run(ctx, "sacct", []string{"--noheader", "--parsable2", "--allocations", "--delimiter=" + acctSep,
		"--jobs=" + jobID, "--format=" + strings.Join(acctFields, ",")}, nil)
	if err != nil {
		return nil, err
	}
	return ParseAcctJob(b, jobID)
}

// ParseAcctJob reads the row of jobID from sacct's output (the fields of
// acctFields, separated by acctSep); ErrNotFound when there is none.
func ParseAcctJob(b []byte, jobID string) (*AcctJob, error) {
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, acctSep)
		if len(f) != len(acctFields) {
			return nil, fmt.Errorf("sacct line %d: %d fields, want %d (%s)", i+1, len(f), len(acctFields), strings.Join(acctFields, ","))
		}
		if f[0] != jobID {
			continue
		}
		uid, err := strconv.Atoi(f[2])
		if err != nil || uid < 0 {
			return nil, fmt.Errorf("sacct line %d: UID %q: want a number", i+1, f[2])
		}
		secs, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil || secs < 0 {
			return nil, fmt.Errorf("sacct line %d: ElapsedRaw %q: want seconds", i+1, f[5])
		}
		// a cancelled job's state reads "CANCELLED by 1002"
		state, _, _ := strings.Cut(f[3], " ")
		return &AcctJob{JobID: f[0], User: f[1], UID: uid, State: state, Partition: f[4], Elapsed: time.Duration(secs) * time.Second,
			ExitCode: f[6], Comment: f[7], AdminComment: f[8]}, nil
	}
	return nil, fmt.Errorf("sacct: job %s: %w", jobID, ErrNotFound)
}
