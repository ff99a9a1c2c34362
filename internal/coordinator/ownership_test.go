package coordinator

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

func TestReservedLineageNames(t *testing.T) {
	t.Parallel()
	task := 3
	alice96 := report.Job{JobID: 96, UID: 1001}
	bob90 := report.Job{JobID: 90, UID: 1002}
	arrayTask := report.Job{JobID: 98, ArrayJobID: 95, ArrayTaskID: &task, UID: 1001}
	for _, tc := range []struct {
		name    string
		job     report.Job
		foreign bool
	}{
		{"lab-96", alice96, false},     // its own default
		{"lab-96", bob90, true},        // another job's default: the squat
		{"lab-95_3", arrayTask, false}, // an array task's default
		{"lab-98", arrayTask, false},   // its own job id
		{"lab-95_3", bob90, true},      // another job's array default
		{"lab-95_4", arrayTask, true},  // another task of the same array
		{"lab-u1001-train-0a1b2c3d", alice96, false},
		{"lab-u1001-train-0a1b2c3d", bob90, true}, // namespaced to another uid
		{"lab-u1001", bob90, false},               // no namespace without a name after it
		{"lab-uX-train", bob90, false},            // not a uid
		{"lab-train-0a1b2c3d", bob90, false},      // free form: first come
		{"other-96", bob90, false},                // another cluster's name
		{"lab-96x", bob90, false},
		{"lab-_3", bob90, false},
		{"lab-", bob90, false},
	} {
		if got, why := reserved("lab", tc.name, tc.job); got != tc.foreign {
			t.Errorf("reserved(%q) for job %d uid %d: %v (%s), want %v", tc.name, tc.job.JobID, tc.job.UID, got, why, tc.foreign)
		}
	}
}

// TestSquattedDefaultLineage: bob's running job claims the wrapper's
// default lineage of job ids that do not exist yet (<cluster>-<job id> is
// predictable), an array task's, and a lineage `isched submit` namespaced
// to alice's uid; his queued job names them in its plan comment too.
// Every claim is refused, and alice's jobs 96 and 97 then report into
// their lineages as usual: tracked as hers, never as bob's.
func TestSquattedDefaultLineage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish([]report.Job{job(90, 1002, "bob", "RUNNING", "cpu", "")}, nil)
	var squats []*wrapperSession
	for _, name := range []string{"lab-96", "lab-95_3", "lab-u1001-train-0a1b2c3d"} {
		w := e.wrapper(90, 1002, "bob", name, "cpu")
		e.start(w)
		e.sample(w, 1, 10, 2)
		squats = append(squats, w)
	}
	e.rounds(2)
	if got := e.counter(RejectForeignLineage); got != 6 {
		t.Errorf("foreign-lineage rejections %v, want 6 (a start and a sample per squatted name)", got)
	}
	// refused before any state is made for the names
	if tracked, err := e.store.HGetAll(context.Background(), "isched:lab:coord:lineages"); err != nil || len(tracked) != 0 {
		t.Errorf("lineages tracked after the refused claims: %v %v", tracked, err)
	}
	// bob's job leaves the job table (ended, MinJobAge): his confirmed
	// sessions still cannot claim the names
	e.publish(nil, nil)
	for _, w := range squats[:1] {
		e.sample(w, 11, 10, 2)
	}
	e.rounds(1)
	plan := report.Plan{Lineage: "lab-u1001-train-0a1b2c3d", Ideal: "cpu", Total: 100}
	task := 3
	array := job(97, 1001, "alice", "RUNNING", "cpu", "")
	array.ArrayJobID, array.ArrayTaskID = 95, &task
	bobPlan := report.Plan{Lineage: "lab-96", Ideal: "cpu", Total: 100}
	e.publish([]report.Job{job(90, 1002, "bob", "RUNNING", "cpu", ""), job(91, 1002, "bob", "PENDING", "cpu", bobPlan.FormatComment()),
		job(92, 1002, "bob", "PENDING", "cpu", plan.FormatComment()),
		job(96, 1001, "alice", "RUNNING", "cpu", ""), array, job(99, 1001, "alice", "PENDING", "cpu", plan.FormatComment())}, nil)
	e.rounds(1)
	for _, name := range []string{"lab-96", "lab-u1001-train-0a1b2c3d"} {
		if b, err := e.store.Get(context.Background(), "isched:lab:job:{"+name+"}:status"); err == nil {
			if st := e.status(name); st.UID != 1001 {
				t.Errorf("%s tracks job %d of uid %d (%s) after bob's queued job named it", name, st.JobID, st.UID, b)
			}
		}
	}
	w96 := e.wrapper(96, 1001, "alice", "lab-96", "cpu")
	e.start(w96)
	e.sample(w96, 1, 5, 100)
	w97 := e.wrapper(97, 1001, "alice", "lab-95_3", "cpu")
	e.start(w97)
	e.sample(w97, 1, 7, 100)
	// bob keeps sending into the names: still refused
	for _, w := range squats {
		e.sample(w, 21, 10, 2)
	}
	e.rounds(2)
	for name, want := range map[string]uint64{"lab-96": 96, "lab-95_3": 97, "lab-u1001-train-0a1b2c3d": 99} {
		st := e.status(name)
		if st.JobID != want || st.UID != 1001 || st.User != "alice" {
			t.Errorf("%s: job %d uid %d user %q, want alice's job %d", name, st.JobID, st.UID, st.User, want)
		}
	}
	if st := e.status("lab-96"); st.Step != 5 {
		t.Errorf("lab-96 at step %d, want alice's 5 (bob's steps refused)", st.Step)
	}
	if got := e.counter(RejectForeignLineage); got != 10 {
		t.Errorf("foreign-lineage rejections %v, want 10", got)
	}
}

// TestUnrestrictedStartCredential: a start credential anybody may decode
// (made without --restrict-uid), or one restricted to another uid that the
// coordinator could open only because it runs as root, exposes the session
// key: refused as unrestricted-credential, and no session is kept.
func TestUnrestrictedStartCredential(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish([]report.Job{job(10, 1001, "alice", "RUNNING", "cpu", "")}, nil)
	for i, restrict := range []int{auth.NoRestriction, os.Geteuid() + 1} {
		w := e.wrapper(10, 1001, "alice", "lab-10", "cpu")
		cred, err := auth.Issue(context.Background(), mungeAs{e.m, 1001}, w.sess, "lab", 10, "lab-10", restrict, time.Minute, e.now)
		if err != nil {
			t.Fatal(err)
		}
		w.cred = cred
		e.start(w)
		e.sample(w, 1, 5, 100)
		e.rounds(1)
		if got := e.counter(RejectUnrestricted); got != float64(i+1) {
			t.Errorf("restricted to %d: unrestricted-credential rejections %v, want %d", restrict, got, i+1)
		}
		if _, err := e.store.HGet(context.Background(), "isched:lab:coord:sessions", w.sess.SID); !errors.Is(err, stream.ErrNotFound) {
			t.Errorf("restricted to %d: session kept (%v)", restrict, err)
		}
	}
	ok := e.wrapper(10, 1001, "alice", "lab-10", "cpu")
	e.start(ok)
	e.rounds(1)
	if st := e.status("lab-10"); st.JobID != 10 {
		t.Errorf("a credential restricted to the coordinator's uid: status %+v", st)
	}
}

func TestConfirmRun(t *testing.T) {
	t.Parallel()
	const t0 = int64(1_800_000_000_000)
	uid := 1001
	plan := report.Plan{Lineage: "L", Ideal: "cpu", Model: "resnet18-1:sgd:fp32", Batch: 16}
	good := report.Job{JobID: 5, UID: 1001, Comment: plan.FormatComment(), SubmitMS: t0, StartMS: t0 + 10_000}
	r := report.Receipt{Model: plan.Model, Batch: 16, IterMS: 100, Iters: 1000, UID: &uid}
	run := ranFor{StartedMS: t0 + 12_000, AttemptStartMS: t0 + 12_000, EndedMS: t0 + 130_000, NowMS: t0 + 131_000}
	other := 1002
	for name, tc := range map[string]struct {
		mutate func(j *report.Job, r *report.Receipt, run *ranFor)
		ok     bool
	}{
		"consistent": {func(*report.Job, *report.Receipt, *ranFor) {}, true},
		"clock skew within 60 s": {func(_ *report.Job, _ *report.Receipt, run *ranFor) {
			run.StartedMS, run.AttemptStartMS = t0-30_000, t0-20_000
		}, true},
		"another owner":          {func(j *report.Job, _ *report.Receipt, _ *ranFor) { j.UID = 1002 }, false},
		"no owner recorded":      {func(_ *report.Job, r *report.Receipt, _ *ranFor) { r.UID = nil }, false},
		"receipt of another uid": {func(_ *report.Job, r *report.Receipt, _ *ranFor) { r.UID = &other }, false},
		"no plan comment":        {func(j *report.Job, _ *report.Receipt, _ *ranFor) { j.Comment = "" }, false},
		"another model":          {func(_ *report.Job, r *report.Receipt, _ *ranFor) { r.Model = "vgg:sgd:fp32" }, false},
		"another batch":          {func(_ *report.Job, r *report.Receipt, _ *ranFor) { r.Batch = 32 }, false},
		"never started":          {func(j *report.Job, _ *report.Receipt, _ *ranFor) { j.StartMS = 0 }, false},
		"before submission":      {func(_ *report.Job, _ *report.Receipt, run *ranFor) { run.StartedMS = t0 - 3_600_000 }, false},
		"attempt before start":   {func(_ *report.Job, _ *report.Receipt, run *ranFor) { run.AttemptStartMS = t0 - 120_000 }, false},
		"ended after Slurm":      {func(j *report.Job, _ *report.Receipt, _ *ranFor) { j.EndMS = t0 + 20_000 }, false},
		"too much work":          {func(_ *report.Job, r *report.Receipt, _ *ranFor) { r.Iters = 100_000 }, false},
	} {
		j, rr, rn := good, r, run
		tc.mutate(&j, &rr, &rn)
		if ok, why := confirmRun(j, true, rr, rn); ok != tc.ok {
			t.Errorf("%s: confirmed %v (%s), want %v", name, ok, why, tc.ok)
		}
	}
	if ok, _ := confirmRun(good, false, r, run); ok {
		t.Error("a job missing from the job table confirmed")
	}
}
