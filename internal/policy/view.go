package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/isched/isched/internal/estimate"
	"github.com/isched/isched/internal/report"
)

// The job as every rule sees it (view), and the formatting of reasons.

// view is a job with what every rule derives from it.
type view struct {
	cfg  Config
	j    Job
	snap *report.Snapshot
	now  time.Time
	ckpt time.Duration
	// known: the remaining work is known (a total and an iteration
	// estimate); rem steps at per ms each on average, high at worst.
	known     bool
	total     int64
	rem       int64
	per, high float64
}

func newView(cfg Config, j Job, snap *report.Snapshot, now time.Time) *view {
	v := &view{cfg: cfg.normalized(), j: j, snap: snap, now: now, ckpt: j.CkptDur, total: j.Total}
	if v.ckpt <= 0 {
		v.ckpt = v.cfg.DefaultCkpt
	}
	if v.total <= 0 && j.Plan != nil {
		v.total = j.Plan.Total
	}
	if v.total > 0 && j.HaveIter && j.Iter.MS > 0 {
		v.known = true
		v.rem = max(v.total-max(j.Step, 0), 0)
		v.per = j.Iter.PerIterMS()
		v.high = max(j.Iter.HighMS, j.Iter.MS) + max(j.Iter.OverheadMSPerIter, 0)
	}
	return v
}

func (v *view) unknownWhy() string {
	if v.total <= 0 {
		return estimate.ReasonNoTotal
	}
	return estimate.ReasonNoEstimate
}

func (v *view) holdsGPUs() bool {
	_, n := gpuRequest(v.j.Gres)
	return n > 0
}

// MaxResumeFailures is how many attempts may restart behind the checkpoint
// they were given before a run is no longer continued or moved.
const MaxResumeFailures = 2

// resumeBroken says why a run must not be requeued onto its checkpoint
// again: its attempts restarted behind it MaxResumeFailures times; "" when
// they did not.
func resumeBroken(j *Job) string {
	if j.ResumeFailures < MaxResumeFailures {
		return ""
	}
	return fmt.Sprintf("%d attempts restarted behind the checkpoint they were given (does the script read ISCHED_RESUME_FROM, "+
		"and can it read that file?)", j.ResumeFailures)
}

// Formatting for reasons.

func (v *view) at(t time.Time) string {
	loc := v.now.Location()
	if v.cfg.Location != nil {
		loc = v.cfg.Location
	}
	t, now := t.In(loc), v.now.In(loc)
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05")
	}
	return t.Format("Jan 2 15:04:05")
}

// dur formats a duration for people: seconds at most, no trailing zero units.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + dur(-d)
	case d == 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func ms(f float64) string {
	if f < 1000 {
		return fmt.Sprintf("%.1f ms", f)
	}
	return dur(msDur(f))
}

func gresText(gres string) string {
	if gres == "" {
		return ""
	}
	return " with gres " + gres
}

func toMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// maxDur bounds durations computed from estimates (time.Duration overflows
// at 292 years).
const maxDur = 100 * 365 * 24 * time.Hour

func msDur(f float64) time.Duration {
	switch {
	case !(f > 0):
		return 0
	case f >= toMS(maxDur):
		return maxDur
	}
	return time.Duration(f * float64(time.Millisecond))
}

// ceilMinute rounds up to whole minutes, at least one: Slurm time limits
// are minutes, and rounding down would cut the margin.
func ceilMinute(d time.Duration) time.Duration {
	m := (d + time.Minute - 1) / time.Minute
	return max(m, 1) * time.Minute
}
