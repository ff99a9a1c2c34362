package coordinator

import (
	"maps"

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
