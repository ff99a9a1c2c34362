package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// staleSnapshot is how old the agent's snapshot may be before `auto`
// prefers asking Slurm: an agent that stopped leaves its last snapshot.
const staleSnapshot = 5 * time.Minute

// maxStatusReads bounds the status keys read to learn the coordinator's
// predicted ends (one GET each).
const maxStatusReads = 200

// clusterView is the cluster state with where it came from.
type clusterView struct {
	state  plan.ClusterState
	source string // shown to the user
}

// loadState gets the cluster state. mode: "auto" (the agent's snapshot in
// Redis when fresh, else Slurm directly), "redis", "slurm" or "none".
func (a *App) loadState(ctx context.Context, mode string) (clusterView, error) {
	now := a.Now()
	switch mode {
	case "none":
		return clusterView{source: "none (--state none): waits unknown"}, nil
	case "redis", "auto":
		v, err := a.stateFromRedis(ctx, now)
		if err == nil && (mode == "redis" || now.Sub(time.UnixMilli(v.state.Snapshot.TakenMS)) <= staleSnapshot) {
			return v, nil
		}
		if mode == "redis" {
			return clusterView{}, err
		}
		why := "stale agent snapshot"
		if err != nil {
			why = err.Error()
		}
		sv, serr := a.stateFromSlurm(ctx, now)
		if serr != nil {
			return clusterView{source: fmt.Sprintf("unavailable (Redis: %s; Slurm: %v): waits unknown", why, serr)}, nil
		}
		sv.source += " (Redis: " + why + ")"
		return sv, nil
	case "slurm":
		return a.stateFromSlurm(ctx, now)
	}
	return clusterView{}, usageErr("--state %q: want auto, redis, slurm or none", mode)
}

func (a *App) stateFromRedis(ctx context.Context, now time.Time) (clusterView, error) {
	st, err := a.openStore(ctx)
	if err != nil {
		return clusterView{}, fmt.Errorf("redis: %w", err)
	}
	k := st.Keys()
	b, err := st.Get(ctx, k.Snapshot())
	if err != nil {
		if errors.Is(err, stream.ErrNotFound) {
			return clusterView{}, fmt.Errorf("no snapshot in Redis (is isched-agent running?)")
		}
		return clusterView{}, err
	}
	env, err := decodeEnvelope(b, report.KindSnapshot)
	if err != nil {
		return clusterView{}, fmt.Errorf("snapshot %s: %w", k.Snapshot(), err)
	}
	v := clusterView{state: plan.ClusterState{Snapshot: env.Snapshot}}
	age := now.Sub(time.UnixMilli(env.Snapshot.TakenMS)).Round(time.Second)
	v.source = fmt.Sprintf("agent snapshot in Redis, %s old", age)
	if b, err := st.Get(ctx, k.Jobs()); err == nil {
		if env, err := decodeEnvelope(b, report.KindJobs); err == nil {
			v.state.Jobs = env.Jobs
			v.state.PredictedEnd = a.predictedEnds(ctx, st, env.Jobs)
		} else {
			v.source += fmt.Sprintf("; job table unreadable: %v", err)
		}
	} else {
		v.source += "; no job table"
	}
	return v, nil
}

// predictedEnds reads the coordinator's ETA of running isched jobs.
func (a *App) predictedEnds(ctx context.Context, st Store, jobs *report.JobTable) map[uint64]time.Time {
	out := map[uint64]time.Time{}
	reads := 0
	for i := range jobs.Jobs {
		j := &jobs.Jobs[i]
		if j.State != "RUNNING" || reads >= maxStatusReads {
			continue
		}
		p, ok, err := report.ParsePlanComment(j.Comment)
		if !ok || err != nil {
			continue
		}
		reads++
		s, err := readStatus(ctx, st, p.Lineage)
		if err != nil || s.JobID != j.JobID || s.ETAMS <= 0 {
			continue
		}
		out[j.JobID] = time.UnixMilli(s.ETAMS)
	}
	return out
}

func (a *App) stateFromSlurm(ctx context.Context, now time.Time) (clusterView, error) {
	s, err := a.Slurm.Poll(ctx)
	if err != nil {
		return clusterView{}, fmt.Errorf("slurm: %w", err)
	}
	snap := s.Snapshot(a.cluster(), now)
	jobs := s.JobTable(a.cluster(), now)
	return clusterView{state: plan.ClusterState{Snapshot: &snap, Jobs: &jobs}, source: "polled from Slurm now"}, nil
}

// readStatus reads a lineage's status as the coordinator stores it.
func readStatus(ctx context.Context, st Store, lineage string) (*report.JobStatus, error) {
	if !stream.ValidName(lineage) {
		return nil, fmt.Errorf("lineage %q: want 1-64 of [A-Za-z0-9._-]", lineage)
	}
	b, err := st.Get(ctx, st.Keys().JobStatus(lineage))
	if err != nil {
		return nil, err
	}
	var s report.JobStatus
	// Not strict: a newer coordinator may add fields, and the CLI shows
	// what it knows rather than nothing.
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("status of %s: %w", lineage, err)
	}
	if s.V != 0 && s.V != report.Version {
		return nil, fmt.Errorf("status of %s: schema version %d (this build reads %d)", lineage, s.V, report.Version)
	}
	return &s, nil
}

// loadReceipts reads receipts: "auto" (Redis when reachable, else none),
// "redis", "none", or a file (a JSON array of receipts, or one per line);
// with auto and redis also the user's own `isched profile` receipts
// (profiledPath), as own.
// From Redis, own are this uid's receipts and pooled other users'
// Slurm-confirmed ones (plan.SplitReceipts; the rest are not used); a
// file's are all own: the user chose them.
func (a *App) loadReceipts(ctx context.Context, from string) (own, pooled []report.Receipt, src string, err error) {
	own, pooled, src, err = a.loadFinished(ctx, from)
	if err != nil || from != "auto" && from != "redis" {
		return own, pooled, src, err
	}
	prof, path, bad, err := a.loadProfiled()
	if err != nil {
		return nil, nil, "", err
	}
	if len(prof) > 0 || bad > 0 {
		src += fmt.Sprintf("; %d profiled in %s", len(prof), path)
		if bad > 0 {
			src += fmt.Sprintf(" (%d unreadable or not yours skipped)", bad)
		}
	}
	return append(own, prof...), pooled, src, nil
}

// loadFinished reads the receipts of finished runs: from Redis (the
// coordinator's) or a file.
func (a *App) loadFinished(ctx context.Context, from string) (own, pooled []report.Receipt, src string, err error) {
	switch from {
	case "none":
		return nil, nil, "none", nil
	case "auto", "redis":
		st, err := a.openStore(ctx)
		if err == nil {
			var vals [][]byte
			vals, err = st.List(ctx, st.Keys().Receipts())
			if err == nil {
				rs, bad := decodeReceipts(vals)
				own, pooled, ignored := plan.SplitReceipts(rs, a.UID())
				src := fmt.Sprintf("%d in Redis: %d yours, %d of other users confirmed by Slurm", len(rs), len(own), len(pooled))
				if ignored > 0 {
					src += fmt.Sprintf(", %d unconfirmed ignored", ignored)
				}
				if bad > 0 {
					src += fmt.Sprintf(" (%d unreadable skipped)", bad)
				}
				return own, pooled, src, nil
			}
		}
		if from == "redis" {
			return nil, nil, "", fmt.Errorf("receipts: %w", err)
		}
		return nil, nil, "none (Redis: " + shortErr(err) + ")", nil
	}
	b, err := readFile(from)
	if err != nil {
		return nil, nil, "", fmt.Errorf("receipts: %w", err)
	}
	var rs []report.Receipt
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] == '[' {
		if err := json.Unmarshal(t, &rs); err != nil {
			return nil, nil, "", fmt.Errorf("receipts %s: %w", from, err)
		}
	} else {
		for n, line := range bytes.Split(t, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var r report.Receipt
			if err := json.Unmarshal(line, &r); err != nil {
				return nil, nil, "", fmt.Errorf("receipts %s: line %d: %w", from, n+1, err)
			}
			rs = append(rs, r)
		}
	}
	return rs, nil, strconv.Itoa(len(rs)) + " from " + from, nil
}

func decodeReceipts(vals [][]byte) ([]report.Receipt, int) {
	var out []report.Receipt
	bad := 0
	for _, v := range vals {
		var r report.Receipt
		if err := json.Unmarshal(v, &r); err != nil {
			bad++
			continue
		}
		out = append(out, r)
	}
	return out, bad
}

func shortErr(err error) string {
	if err == nil {
		return "unavailable"
	}
	s := err.Error()
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}
