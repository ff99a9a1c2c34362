package wrapper

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/report"
)

// Never two attempts of one run at once. A run's jobs share its checkpoint
// directory and lineage resume file: a second job of the lineage that
// starts while another still runs (a pending twin on the ideal partition
// that Slurm starts while the run computes elsewhere, issue 41's lever c;
// or the same run submitted twice by hand) would resume from a checkpoint
// the first is still writing, and both would write the next ones. So
// before the command starts, and before the resume point is read, the
// wrapper waits until no other running job of its user names its lineage
// (the plan comment isched submit writes), polling Slurm, for at most
// --handover-wait; the coordinator meanwhile checkpoints and ends the
// other attempt. If it is still running then, the command does not start
// (exit 75, EX_TEMPFAIL): the run goes on where it was.

// ExitHandoverTimeout is the wrapper's status when another attempt of
// the lineage kept running through --handover-wait: the command never
// started.
const ExitHandoverTimeout = 75

// handoverPoll is how often Slurm is asked while waiting.
const handoverPoll = 5 * time.Second

// Attempts finds the other running jobs of a lineage.
type Attempts interface {
	// Running lists the jobs of user uid, other than self, that are
	// running (or starting, or completing) and name lineage.
	Running(ctx context.Context, uid int, lineage string, self uint64) ([]uint64, error)
}

// awaitOtherAttempts is the wait above; ok false: exit with code.
func (r *run) awaitOtherAttempts() (code int, ok bool) {
	a := r.d.Attempts
	if !r.inSlurm || a == nil || r.opts.HandoverWait <= 0 || r.job.ArrayTaskID != nil {
		return 0, true // an array task's lineage is not its job's comment's
	}
	poll := r.opts.handoverPoll
	if poll <= 0 {
		poll = handoverPoll
	}
	deadline := time.Now().Add(r.opts.HandoverWait)
	var others []uint64
	for {
		ids, err := a.Running(r.outer, r.job.UID, r.job.Lineage, r.job.JobID)
		switch {
		case err != nil:
			r.log.Warn("other jobs of the lineage not checked (Slurm not asked); the command starts", "err", err)
			return 0, true
		case len(ids) == 0 && others != nil:
			r.log.Info("the lineage's other job ended: the command starts", "waited_for", others)
			return 0, true
		case len(ids) == 0:
			return 0, true
		case others == nil:
			r.log.Info("another job of the lineage is running: waiting for it to end before the command starts (a handover; two attempts must not write one checkpoint directory)",
				"jobs", ids, "lineage", r.job.Lineage, "at_most", r.opts.HandoverWait)
		}
		others = ids
		if !time.Now().Before(deadline) {
			fmt.Fprintf(r.d.Stderr, "isched-wrapper: job(s) %s of lineage %s still running after --handover-wait %s: the command does not start beside them (both would write the same checkpoints); exit %d\n",
				joinIDs(ids), r.job.Lineage, r.opts.HandoverWait, ExitHandoverTimeout)
			return ExitHandoverTimeout, false
		}
		select {
		case <-r.outer.Done():
			return ExitHandoverTimeout, false
		case <-time.After(poll):
		}
	}
}

func joinIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}

// SqueueAttempts is the production Attempts: squeue lists the user's
// running jobs with their comments (no shell; 10 s at most).
type SqueueAttempts struct{}

// Running implements Attempts.
func (SqueueAttempts) Running(ctx context.Context, uid int, lineage string, self uint64) ([]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "squeue", "-h", "-u", strconv.Itoa(uid), "-t", "CONFIGURING,RUNNING,COMPLETING,SUSPENDED", "-o", "%i %k")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("squeue: %w: %s", err, strings.TrimSpace(errb.String()))
	}
	return attemptsOf(out.Bytes(), lineage, self), nil
}

// attemptsOf reads `squeue -h -o "%i %k"` lines: the jobs other than self
// whose plan comment names lineage. Array tasks ("12_3") and comments
// that are no plan are left out.
func attemptsOf(b []byte, lineage string, self uint64) []uint64 {
	var ids []uint64
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		idText, comment, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		id, err := strconv.ParseUint(idText, 10, 64)
		if err != nil || id == self {
			continue
		}
		p, isPlan, err := report.ParsePlanComment(strings.TrimSpace(comment))
		if isPlan && err == nil && p.Lineage == lineage {
			ids = append(ids, id)
		}
	}
	return ids
}
