package coordinator

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/isched/isched/internal/report"
	seff "github.com/isched/isched/internal/verdict"
)

// jobUse is what the attempts of a lineage used, summed over their end
// reports, for the verdict at its end.
type jobUse struct {
	CPUSeconds  float64            `json:"cpu_s,omitempty"`
	CoreSeconds float64            `json:"core_s,omitempty"` // cores × wall, of the attempts that told their cores
	Cores       int                `json:"cores,omitempty"`  // of the last attempt that told them
	MemRequest  int64              `json:"mem_request,omitempty"`
	MemFrom     string             `json:"mem_from,omitempty"`
	GPUUtil     map[string]float64 `json:"gpu_util,omitempty"` // mean, last attempt per device
	Ends        int                `json:"ends,omitempty"`
}

// add folds one end report in.
func (u *jobUse) add(end *report.End) {
	u.Ends++
	u.CPUSeconds += end.CPUSeconds
	if end.Cores > 0 && end.CPUSeconds > 0 {
		u.CoreSeconds += float64(end.Cores) * float64(end.WallMS) / 1000
		u.Cores = end.Cores
	}
	if end.MemRequestBytes > 0 && u.MemFrom != "job table" {
		u.MemRequest, u.MemFrom = end.MemRequestBytes, "Slurm environment"
	}
	if len(end.GPUUtilPercent) > 0 {
		if u.GPUUtil == nil {
			u.GPUUtil = map[string]float64{}
		}
		maps.Copy(u.GPUUtil, end.GPUUtilPercent)
	}
}

// requested records what the job table says the job asked for (--mem or
// --mem-per-cpu, per node): Slurm's word over the wrapper's environment.
func (u *jobUse) requested(j report.Job) {
	if j.MemPerNodeBytes > 0 {
		u.MemRequest, u.MemFrom = j.MemPerNodeBytes, "job table"
	}
}

// moveLoss is the time the lineage lost to its moves and restarts: the gaps
// between one attempt's end and the next one's start, and the iterations the
// next attempt redid (it resumed from a checkpoint behind where the last one
// got).
func moveLoss(h []report.Span, iterMS float64) (moves int, lostS float64) {
	for i := 1; i < len(h); i++ {
		prev, next := h[i-1], h[i]
		if prev.EndMS == 0 || next.StartMS < prev.EndMS {
			continue
		}
		moves++
		lostS += float64(next.StartMS-prev.EndMS) / 1000
		if redo := prev.EndStep - next.StartStep; redo > 0 && iterMS > 0 {
			lostS += float64(redo) * iterMS / 1000
		}
	}
	return moves, lostS
}

// judge computes the verdict of an ended lineage into its status.
func (l *lineage) judge() {
	st := &l.Status
	u := l.Use
	in := seff.Input{PeakRSSBytes: st.PeakRSSBytes, PageCacheBytes: st.PeakPageCacheBytes, Iterations: max(st.Step, 0),
		Checkpoints: int(l.Ckpts), MemRequestBytes: u.MemRequest, MemRequestFrom: u.MemFrom, CPUSeconds: u.CPUSeconds, Cores: u.Cores}
	if st.EndedMS > st.StartedMS && st.StartedMS > 0 {
		in.WallSeconds = float64(st.EndedMS-st.StartedMS) / 1000
	}
	if u.CoreSeconds > 0 && u.Cores > 0 {
		// the efficiency over the attempts' own walls (not the gaps
		// between them): an equivalent wall on the last attempt's cores
		in.WallSeconds = u.CoreSeconds / float64(u.Cores)
	}
	if in.MemRequestBytes == 0 && st.MemLimitBytes > 0 {
		in.MemRequestBytes, in.MemRequestFrom = st.MemLimitBytes, "cgroup limit"
	}
	for _, ev := range st.Events {
		in.OOM = in.OOM || ev.Kind == "oom"
	}
	for id, peak := range st.PeakGPUBytes {
		g := seff.GPU{ID: id, PeakBytes: peak}
		if v, ok := u.GPUUtil[id]; ok {
			g.UtilPercent, g.UtilKnown = v, true
		}
		in.GPUs = append(in.GPUs, g)
	}
	in.Moves, in.MoveLostSeconds = moveLoss(st.History, st.IterMS)
	v := seff.Judge(in)
	st.Verdict = &report.Verdict{MemRequestBytes: in.MemRequestBytes, MemFraction: v.MemFraction, CPUSeconds: in.CPUSeconds,
		Cores: in.Cores, CPUEfficiency: v.CPUEfficiency, MoveLostS: in.MoveLostSeconds, AskMemBytes: v.AskMemBytes, AskCores: v.AskCores,
		Recommendation: v.Recommendation, Lines: seff.Lines(in, v)}
}

// annotation is a verdict to write into a job's AdminComment.
type annotation struct {
	lineage, user string
	jobID         uint64
	text          string
}

// annotate queues the verdict of a run whose wrapper just ended for the
// job's AdminComment (Config.AdminComment). It is sent at the next tick:
// Slurm refuses the change once the job has ended, so it lands only when
// the job outlives its wrapper by that long (a job script with more after
// the wrapper, or Slurm's epilog).
func (c *Coordinator) annotate(l *lineage, atMS int64) {
	if !c.cfg.AdminComment {
		return
	}
	st := &l.Status
	if st.Verdict == nil {
		ended := st.EndedMS
		st.EndedMS = atMS // the run's wall so far, for the verdict
		l.judge()
		st.EndedMS = ended
	}
	v := st.Verdict
	text := "isched: " + v.Recommendation
	if v.MemRequestBytes > 0 {
		text += fmt.Sprintf(" (process peak %s of %s asked", seff.Bytes(st.PeakRSSBytes), seff.Bytes(v.MemRequestBytes))
		if v.CPUEfficiency > 0 {
			text += fmt.Sprintf(", CPU efficiency %.0f%%", 100*v.CPUEfficiency)
		}
		text += ")"
	}
	c.annotations = append(c.annotations, annotation{lineage: st.Lineage, user: st.User, jobID: st.JobID,
		text: report.TruncateText(strings.Map(printableRune, text), report.MaxAdminComment)})
}

// printableRune keeps an AdminComment one printable line.
func printableRune(r rune) rune {
	if unicode.IsPrint(r) {
		return r
	}
	return ' '
}

// sendAnnotations appends the queued AdminComment actions; the agent
// executes them (it alone changes jobs).
func (c *Coordinator) sendAnnotations(ctx context.Context, now time.Time) error {
	for len(c.annotations) > 0 {
		a := c.annotations[0]
		l := c.lineages[a.lineage]
		if l == nil {
			c.annotations = c.annotations[1:]
			continue
		}
		l.Actions++
		id := a.lineage + ":" + strconv.Itoa(l.Status.Attempt) + ":" + strconv.Itoa(l.Actions)
		env := report.NewEnvelope(report.KindAction, now)
		env.Action = &report.Action{ID: id, Type: report.ActionAnnotate, Cluster: c.keys.Cluster, JobID: a.jobID, Lineage: a.lineage,
			User: a.user, AdminComment: a.text, Reason: "end-of-job verdict", IssuedMS: now.UnixMilli()}
		b, err := report.Encode(env)
		if err != nil {
			c.log.Error("AdminComment action not encodable", "lineage", a.lineage, "err", err)
			c.annotations = c.annotations[1:]
			continue
		}
		if err := c.sendAction(ctx, b); err != nil {
			return err
		}
		l.decision(report.Decision{AtMS: now.UnixMilli(), Kind: "annotate", Reason: "the verdict into the job's AdminComment", ActionID: id})
		l.dirty = true
		c.touched[a.lineage] = l
		c.annotations = c.annotations[1:]
	}
	return nil
}
