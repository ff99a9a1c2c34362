package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// limitsPoller is slurmPoller with the accounting read from the captured
// sacctmgr output (or failing with err), counting the reads.
type limitsPoller struct {
	slurmPoller
	reads int
	err   error
}

func (p *limitsPoller) Limits(context.Context) ([]slurm.QOS, []slurm.Association, error) {
	p.reads++
	if p.err != nil {
		return nil, nil, p.err
	}
	qb, err := os.ReadFile(filepath.Join(testdata, "sacctmgr-qos.txt"))
	if err != nil {
		return nil, nil, err
	}
	ab, err := os.ReadFile(filepath.Join(testdata, "sacctmgr-assoc.txt"))
	if err != nil {
		return nil, nil, err
	}
	q, _ := slurm.ParseQOS(qb)
	a, _ := slurm.ParseAssociations(ab)
	return q, a, nil
}

func (e *env) snapshot(t *testing.T) *report.Snapshot {
	t.Helper()
	b, err := e.mr.Get("isched:lab:snapshot")
	if err != nil {
		t.Fatal(err)
	}
	env, err := report.Decode([]byte(b))
	if err != nil {
		t.Fatal(err)
	}
	return env.Snapshot
}

// TestPublishLimits: the snapshot carries the captured accounting's
// limits (capped: 2 CPUs and 2 jobs per user for alice and bob; gpulimit:
// 8 and 4 for bob; bob's association: 6 CPUs, MaxJobs 5 tighter than
// GrpJobs 7; memory and node limits are not kept), read once a
// minute however often the agent polls; a failed read publishes none,
// says so once, and the next good read brings them back.
func TestPublishLimits(t *testing.T) {
	e := newEnv(t)
	c, _ := realState(t)
	p := &limitsPoller{slurmPoller: slurmPoller{e.slurm, c}}
	a, err := New(e.config(), p, e.rdb)
	if err != nil {
		t.Fatal(err)
	}
	publish := func() *report.Snapshot {
		t.Helper()
		if err := a.PublishOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		return e.snapshot(t)
	}
	s := publish()
	var got []string
	for _, l := range s.Limits {
		got = append(got, l.User+"/"+l.QOS+"/"+l.Resource+"="+itoa(l.Max)+"/"+l.Reason)
	}
	want := "alice/capped/cpu=2/QOSMaxCpuPerUserLimit alice/capped/jobs=2/QOSMaxJobsPerUserLimit " +
		"bob//cpu=6/AssocGrpCpuLimit bob//jobs=5/AssocMaxJobsLimit bob/capped/cpu=2/QOSMaxCpuPerUserLimit bob/capped/jobs=2/QOSMaxJobsPerUserLimit " +
		"bob/gpulimit/cpu=8/QOSMaxCpuPerUserLimit bob/gpulimit/jobs=4/QOSMaxJobsPerUserLimit"
	if strings.Join(got, " ") != want {
		t.Errorf("limits:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	e.now = e.now.Add(30 * time.Second)
	publish()
	if p.reads != 1 {
		t.Errorf("%d accounting reads in 30 s of polls, want 1", p.reads)
	}
	p.err = errors.New("sacctmgr: error: Problem talking to the database: Connection refused")
	for range 2 {
		e.now = e.now.Add(time.Minute)
		if s := publish(); s.Limits != nil {
			t.Errorf("limits published from a failed read: %+v", s.Limits)
		}
	}
	if n := strings.Count(e.logs.String(), "per-user limits not published"); n != 1 {
		t.Errorf("the failure logged %d times, want once:\n%s", n, e.logs.String())
	}
	p.err = nil
	e.now = e.now.Add(time.Minute)
	if s := publish(); len(s.Limits) != 8 || p.reads != 4 {
		t.Errorf("after recovery: %d limits, %d reads; want 8 and 4", len(s.Limits), p.reads)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
