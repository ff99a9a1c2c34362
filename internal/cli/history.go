package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
)

// The submission history lets `isched status JOB` and `isched report JOB`
// find the lineage of the user's own jobs after Slurm and the agent's job
// table have forgotten them (MinJobAge): one line "<cluster> <job id>
// <lineage>" per submission, and " array=<spec>" for an array (whose
// elements are lineages <lineage>_<task>), in the user's cache directory.

// historyPath is $XDG_CACHE_HOME/isched/submitted, else
// $HOME/.cache/isched/submitted; "" when neither is set.
func (a *App) historyPath() string {
	dir := a.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		home := a.Getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "isched", "submitted")
}

// remember appends a submission; failing to is only worth a warning.
func (a *App) remember(cluster, jobID, lineage, array string) error {
	if cluster == "" {
		cluster = a.cluster()
	}
	p := a.historyPath()
	if p == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	line := cluster + " " + jobID + " " + lineage
	if array != "" {
		line += " array=" + array
	}
	_, err = fmt.Fprintln(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// recall finds the lineage of a job id this user submitted to this
// cluster (the latest).
func (a *App) recall(jobID string) string {
	return a.recallOn(a.cluster(), jobID)
}

// recallElsewhere finds the lineage of a job id this user submitted to
// another cluster of the clusters setting (the latest), "" when none.
func (a *App) recallElsewhere(jobID string) string {
	found := ""
	for _, c := range a.otherNames() {
		if l := a.recallOn(c, jobID); l != "" {
			found = l
		}
	}
	return found
}

// recallOn is recall for a cluster's submissions.
func (a *App) recallOn(cluster, jobID string) string {
	found := ""
	for _, e := range a.submissions(cluster) {
		if e.jobID == jobID {
			found = e.lineage
		}
	}
	return found
}

// submitted is one line of the submission history.
type submitted struct{ jobID, lineage, array string }

// submissions are the history's entries for a cluster, oldest first.
func (a *App) submissions(cluster string) []submitted {
	p := a.historyPath()
	if p == "" {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []submitted
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || len(fields) > 4 || fields[0] != cluster || !isJobID(fields[1]) || !stream.ValidName(fields[2]) {
			continue
		}
		s := submitted{jobID: fields[1], lineage: fields[2]}
		if len(fields) == 4 {
			spec, ok := strings.CutPrefix(fields[3], "array=")
			if _, err := slurm.ParseArraySpec(spec); !ok || err != nil {
				continue
			}
			s.array = spec
		}
		out = append(out, s)
	}
	return out
}

// maxHistoryJobs bounds the submissions historyTable asks Slurm about.
const maxHistoryJobs = 100

// historyTable is a job table of this user's latest submissions that
// slurmctld still shows (scontrol show job each): what `isched status`
// lists where no agent publishes the cluster's job table.
func (a *App) historyTable(ctx context.Context) *report.JobTable {
	subs := a.submissions(a.cluster())
	if len(subs) > maxHistoryJobs {
		subs = subs[len(subs)-maxHistoryJobs:]
	}
	t := &report.JobTable{}
	seen := map[string]bool{}
	for _, s := range subs {
		if seen[s.jobID] {
			continue
		}
		seen[s.jobID] = true
		info, err := a.Slurm.ShowJob(ctx, s.jobID)
		if err != nil {
			continue // forgotten by slurmctld (MinJobAge), or no Slurm to ask
		}
		id, _ := strconv.ParseUint(info.JobID, 10, 64)
		j := report.Job{JobID: id, Name: info.Name, User: info.User, UID: info.UID, Partition: info.Partition, State: info.State,
			Reason: info.Reason, Nodes: info.NodeList, Comment: info.Comment, StartMS: unixMilliOrZero(info.StartTime)}
		if info.Ended() {
			j.EndMS = unixMilliOrZero(info.EndTime)
		}
		t.Jobs = append(t.Jobs, j)
	}
	return t
}

func unixMilliOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
