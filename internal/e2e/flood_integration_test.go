//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestStartFloodAsBob (issue 18, item 3): bob, a second Unix user, floods
// the real coordinator with 300 start reports, each a fresh session with a
// valid MUNGE credential of his own, for a job the agent does not list.
// The coordinator keeps none of them (no session is saved before the job
// table confirms its owner; at most 8 wait in memory, the rest are refused
// over-budget), and a job started right after the flood is heard as
// usual: its start report applied, its status its own.
func TestStartFloodAsBob(t *testing.T) {
	w := newWorld(t, fastPolicy)
	flooder := testutil.Binary(t, "isched-flooder", "./internal/e2e/testdata/flooder")
	bob, err := user.Lookup("bob")
	if err != nil {
		t.Fatalf("test user bob: %v (scripts/dev-cluster up creates him)", err)
	}
	bobUID, _ := strconv.Atoi(bob.Uid)
	stamp := time.Now().UnixNano() % 1e6
	const flood = 300
	spec, _ := json.Marshal(map[string]any{"cluster": w.cluster, "coordinator_uid": os.Getuid(), "job": uint64(4_000_000_000),
		"lineage": fmt.Sprintf("flood%d", stamp), "n": flood})
	cmd := exec.Command("runuser", "-u", "bob", "--", flooder)
	// the site that opted in to direct reports: bob holds the reporter
	// password (by default no user can read it, TestNoRedisCredentialAsBob)
	pass := w.optInReporterPass(testutil.WorkDir(t, "isched-flood-"))
	cmd.Env = append(os.Environ(), "ISCHED_REDIS_ADDR="+w.redis.Addr, "ISCHED_REDIS_PASSWORD_FILE="+pass,
		"ISCHED_CLUSTER="+w.cluster)
	cmd.Stdin = bytes.NewReader(spec)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(flood) {
		t.Fatalf("flooder as bob: %v: %s", err, out)
	}

	plan := report.Plan{Lineage: fmt.Sprintf("afterflood%d", stamp), Ideal: "cpu", Total: 100, Migrate: false}
	j := w.submitTrainer(plan, []string{"-p", "cpu", "-n", "1", "-t", "5"}, "--steps", "100", "--period", "0.1")
	waitFor(t, w, 2*time.Minute, "the job started after the flood reporting", func() bool {
		st, ok := w.status(plan.Lineage)
		return ok && st.State == "RUNNING" && strconv.FormatUint(st.JobID, 10) == j.id && st.Step >= 5
	})

	c, err := w.client("coordinator")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	all, err := c.HGetAll(context.Background(), c.Keys().Sessions())
	if err != nil {
		t.Fatal(err)
	}
	bobs := 0
	for _, v := range all {
		var s struct {
			UID int `json:"uid"`
		}
		if json.Unmarshal([]byte(v), &s) == nil && s.UID == bobUID {
			bobs++
		}
	}
	if bobs != 0 {
		t.Errorf("%d of bob's %d flood sessions saved for a job nobody confirmed (of %d sessions)", bobs, flood, len(all))
	}
	if logs, _ := os.ReadFile(filepath.Join(w.dir, "coordinator.log")); !bytes.Contains(logs, []byte("over-budget")) {
		t.Errorf("no over-budget refusal logged:\n%s", w.logs())
	}
}
