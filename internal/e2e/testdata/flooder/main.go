// Command flooder is the flooding half of TestStartFloodAsBob
// (internal/e2e/flood_integration_test.go): run as a second Unix user with
// the reporter's credentials every wrapper has, it appends n start
// reports, each a fresh session sealed by MUNGE as that user (valid, and
// his), for one job and lineage, and prints how many Redis took.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// Spec is what the test hands the flooder on stdin.
type Spec struct {
	Cluster        string `json:"cluster"`
	CoordinatorUID int    `json:"coordinator_uid"`
	Job            uint64 `json:"job"`
	Lineage        string `json:"lineage"`
	N              int    `json:"n"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "flooder:", err)
		os.Exit(2)
	}
}

func run() error {
	var sp Spec
	if err := json.NewDecoder(os.Stdin).Decode(&sp); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg, err := stream.ConfigFromEnv(os.Getenv, "reporter")
	if err != nil {
		return err
	}
	c, err := stream.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	me := os.Getuid()
	sent := 0
	for range sp.N {
		s, err := auth.NewSession()
		if err != nil {
			return err
		}
		cred, err := auth.Issue(ctx, auth.ExecMunger{}, s, sp.Cluster, sp.Job, sp.Lineage, sp.CoordinatorUID, time.Hour, time.Now())
		if err != nil {
			return err
		}
		e := report.NewEnvelope(report.KindStart, time.Now())
		e.Job = &report.JobRef{Cluster: sp.Cluster, JobID: sp.Job, Lineage: sp.Lineage, User: "flood", UID: me, Partition: "cpu", Node: "cpu1"}
		e.SID, e.Seq = s.SID, 1
		e.Start = &report.Start{Argv: []string{"python3", "train.py"}, Host: "flood", PID: 1, WrapperVersion: "flooder", Cred: cred}
		b, err := report.Encode(e)
		if err != nil {
			return err
		}
		if _, err := c.Append(ctx, c.Keys().Ingest(), b, s.Sign(b), 100000); err != nil {
			return err
		}
		sent++
	}
	fmt.Println(sent)
	return nil
}
