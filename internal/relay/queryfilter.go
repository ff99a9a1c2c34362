package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/isched/isched/internal/relayproto"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// What a status query shows a uid that does not see all (queryService.read).

// ownerRecord is the part of the coordinator's lineage state that names
// its owner: owner_uid, the first authenticated uid whose job claimed the
// lineage (coordinator.lineage.OwnerUID), else, in a state saved before
// owners were recorded, the uid of its last start.
type ownerRecord struct {
	OwnerUID *int `json:"owner_uid"`
	Status   struct {
		JobID uint64 `json:"job_id"`
		UID   int    `json:"uid"`
	} `json:"status"`
}

// owner is the lineage's owner as the coordinator recorded it: from its
// state, else (the state expired or not written yet) from its status;
// found false when neither names one.
func (q *queryService) owner(ctx context.Context, lineage string) (uid int, found bool, err error) {
	k := q.cfg.Keys
	for _, key := range []string{k.JobState(lineage), k.JobStatus(lineage)} {
		b, err := q.cfg.Reader.Get(ctx, key)
		if errors.Is(err, stream.ErrNotFound) {
			continue
		}
		if err != nil {
			return -1, false, err
		}
		var r ownerRecord
		if key == k.JobStatus(lineage) {
			err = json.Unmarshal(b, &r.Status)
		} else {
			err = json.Unmarshal(b, &r)
		}
		switch {
		case err != nil:
			return -1, false, fmt.Errorf("%s: %w", key, err)
		case r.OwnerUID != nil:
			return *r.OwnerUID, true, nil
		case r.Status.JobID != 0:
			return r.Status.UID, true, nil
		}
	}
	return -1, false, nil
}

// jobTable is the agent's job table with uid's jobs only.
func (q *queryService) jobTable(ctx context.Context, uid int, all bool) (relayproto.QueryReply, error) {
	return q.get(ctx, q.cfg.Keys.Jobs(), func(b []byte) ([]byte, error) {
		env, err := report.DecodeTableOf(b, report.KindJobs)
		if err != nil || all {
			return b, err
		}
		mine := env.Jobs.Jobs[:0]
		for _, j := range env.Jobs.Jobs {
			if j.UID == uid {
				mine = append(mine, j)
			}
		}
		env.Jobs.Jobs = mine
		return report.Encode(env)
	})
}

// snapshot is the agent's snapshot with uid's own limits only: each
// user's limits carry their use now (running jobs, CPUs, GPUs).
func (q *queryService) snapshot(ctx context.Context, uid int, all bool) (relayproto.QueryReply, error) {
	return q.get(ctx, q.cfg.Keys.Snapshot(), func(b []byte) ([]byte, error) {
		env, err := report.DecodeTableOf(b, report.KindSnapshot)
		if err != nil || all || len(env.Snapshot.Limits) == 0 {
			return b, err
		}
		name, nerr := q.cfg.UserName(uid)
		mine := env.Snapshot.Limits[:0]
		for _, l := range env.Snapshot.Limits {
			if nerr == nil && l.User == name {
				mine = append(mine, l)
			}
		}
		env.Snapshot.Limits = mine
		return report.Encode(env)
	})
}

// receipts are the coordinator's receipts: uid's own as they are, and of
// other users' only the Slurm-confirmed ones (the only ones anyone's
// estimate pools), made anonymous: no user name, no times, and in place
// of the uid a negative number (never a real uid) per user, the same for
// one user within one answer, so that pooling still counts users.
func (q *queryService) receipts(ctx context.Context, uid int, all bool) (relayproto.QueryReply, error) {
	vals, err := q.cfg.Reader.List(ctx, q.cfg.Keys.Receipts())
	if err != nil || all {
		return listReply(vals), err
	}
	out := vals[:0]
	alias := map[int]int{}
	for _, v := range vals {
		var r report.Receipt
		if json.Unmarshal(v, &r) != nil || r.UID == nil {
			continue
		}
		if *r.UID == uid {
			out = append(out, v)
			continue
		}
		if !r.Confirmed {
			continue
		}
		a, ok := alias[*r.UID]
		if !ok {
			a = -1 - len(alias)
			alias[*r.UID] = a
		}
		r.UID, r.User, r.EndedMS, r.WallS, r.Iters = &a, "", 0, 0, 0
		b, err := json.Marshal(r)
		if err != nil {
			return relayproto.QueryReply{}, fmt.Errorf("receipt: %w", err)
		}
		out = append(out, b)
	}
	return listReply(out), nil
}
