package cli

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/isched/isched/internal/stream"
)

// The submission history lets `isched status JOB` and `isched report JOB`
// find the lineage of the user's own jobs after Slurm and the agent's job
// table have forgotten them (MinJobAge): one line "<cluster> <job id>
// <lineage>" per submission, in the user's cache directory.

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
func (a *App) remember(cluster, jobID, lineage string) error {
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
	_, err = fmt.Fprintf(f, "%s %s %s\n", cluster, jobID, lineage)
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
	p := a.historyPath()
	if p == "" {
		return ""
	}
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	found := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == cluster && fields[1] == jobID && stream.ValidName(fields[2]) {
			found = fields[2]
		}
	}
	return found
}
