// Command attacker is the hostile-user half of the e2e hostile suite
// (internal/e2e/hostile_integration_test.go): run as a second Unix user
// with the reporter's credentials every wrapper has, it tries what such a
// user could try against a running isched and prints one JSON line per
// attempt: what it did and what Redis answered. Whether the coordinator
// then refused it is for the test to check.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// Spec is what the test hands the attacker on stdin.
type Spec struct {
	Cluster        string `json:"cluster"`
	CoordinatorUID int    `json:"coordinator_uid"`
	VictimJob      uint64 `json:"victim_job"`
	VictimLineage  string `json:"victim_lineage"`
	VictimUID      int    `json:"victim_uid"`
	// OwnJob is a job of the attacker's, carrying the victim's lineage in
	// its plan comment (a lineage id is public: squeue shows comments).
	OwnJob uint64 `json:"own_job"`
	// Replay is a real report of the victim's, captured by the test.
	ReplayPayload string `json:"replay_payload"`
	ReplayMAC     string `json:"replay_mac"`
}

// Outcome is one attempt.
type Outcome struct {
	Attack string `json:"attack"`
	Result string `json:"result"` // "sent", "noperm" or "error: ..."
}

func main() {
	var sp Spec
	if err := json.NewDecoder(os.Stdin).Decode(&sp); err != nil {
		fmt.Fprintln(os.Stderr, "attacker: spec:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := stream.ConfigFromEnv(os.Getenv, "reporter")
	if err != nil {
		fmt.Fprintln(os.Stderr, "attacker:", err)
		os.Exit(2)
	}
	c, err := stream.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "attacker:", err)
		os.Exit(2)
	}
	defer c.Close()
	enc := json.NewEncoder(os.Stdout)
	say := func(attack string, err error) {
		r := "sent"
		switch {
		case noPerm(err):
			r = "noperm"
		case err != nil:
			r = "error: " + err.Error()
		}
		_ = enc.Encode(Outcome{Attack: attack, Result: r})
	}
	k := c.Keys()
	me := os.Getuid()

	// Redis: what the reporter user may not do
	_, err = c.Range(ctx, k.Ingest(), "-", "+", 10)
	say("read-ingest", err)
	_, err = c.Append(ctx, k.Actions(), []byte(`{"v":1}`), "", 1000)
	say("write-actions", err)
	say("write-snapshot", c.Set(ctx, k.Snapshot(), []byte(`{}`), 0))
	say("delete-ingest", c.Del(ctx, k.Ingest()))

	// reports: each a start of a session of the attacker's own, signed with
	// its key and sealed by MUNGE as the attacker (MUNGE vouches for the uid)
	start := func(attack string, job report.JobRef, withCred bool) {
		s, err := auth.NewSession()
		if err != nil {
			say(attack, err)
			return
		}
		e := report.NewEnvelope(report.KindStart, time.Now())
		e.Job, e.SID, e.Seq = &job, s.SID, 1
		e.Start = &report.Start{Argv: []string{"python3", "train.py"}, Host: "evil", PID: 1, WrapperVersion: "attacker"}
		if withCred {
			cred, err := auth.Issue(ctx, auth.ExecMunger{}, s, job.Cluster, job.JobID, job.Lineage, sp.CoordinatorUID, time.Hour, time.Now())
			if err != nil {
				say(attack, err)
				return
			}
			e.Start.Cred = cred
		}
		b, err := report.Encode(e)
		if err != nil {
			say(attack, err)
			return
		}
		_, err = c.Append(ctx, k.Ingest(), b, s.Sign(b), 100000)
		say(attack, err)
	}
	ref := func(jobID uint64, lineage string, uid int) report.JobRef {
		return report.JobRef{Cluster: sp.Cluster, JobID: jobID, Lineage: lineage, User: "x", UID: uid, Partition: "cpu", Node: "cpu1"}
	}
	// the victim's job under the attacker's own uid: MUNGE says attacker,
	// the job table says victim
	start("foreign-job", ref(sp.VictimJob, sp.VictimLineage, me), true)
	// the victim's uid claimed: MUNGE contradicts it
	start("forged-uid", ref(sp.VictimJob, sp.VictimLineage, sp.VictimUID), true)
	// the attacker's own job, reporting into the victim's lineage
	start("foreign-lineage", ref(sp.OwnJob, sp.VictimLineage, me), true)
	// no credential at all
	start("unauthenticated", ref(sp.VictimJob, sp.VictimLineage, sp.VictimUID), false)

	// a captured report of the victim's, appended again verbatim
	if sp.ReplayPayload != "" {
		_, err = c.Append(ctx, k.Ingest(), []byte(sp.ReplayPayload), sp.ReplayMAC, 100000)
		say("replay", err)
	} else {
		say("replay", errors.New("no captured report given"))
	}
	// garbage: 1 MB of it, and a report whose text fields carry shell
	// metacharacters, a newline and NUL
	_, err = c.Append(ctx, k.Ingest(), []byte(strings.Repeat("A", 1<<20)), "00", 100000)
	say("oversize", err)
	_, err = c.Append(ctx, k.Ingest(), []byte("{\"v\":1,\"kind\":\"start\",\"job\":{\"lineage\":\"$(touch /tmp/pwned)\n\\u0000\"}}"), "00", 100000)
	say("malformed", err)
}

// noPerm reports whether err is Redis refusing a command or key by ACL.
func noPerm(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOPERM")
}
