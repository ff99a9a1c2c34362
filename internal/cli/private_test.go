package cli

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/isched/isched/internal/relay"
	"github.com/isched/isched/internal/relayproto"
	"github.com/isched/isched/internal/stream"
)

// credUID is a relay verifier for tests: the credential "uid:N" is uid N
// (the real one is MUNGE's, relay.MungeVerifier).
type credUID struct{}

func (credUID) Verify(_ context.Context, cred string) (int, error) {
	var uid int
	if _, err := fmt.Sscanf(cred, "uid:%d", &uid); err != nil {
		return -1, relayproto.ErrCredential
	}
	return uid, nil
}

// privateSlurm is a Slurm whose PrivateData hides jobs.
type privateSlurm struct {
	*fakeSlurm
	items []string
}

func (p privateSlurm) PrivateData(context.Context) ([]string, error) { return p.items, nil }

// startStatusRelay starts a relay answering status queries from the
// harness's Redis, read as the viewer, and points the CLI at it; the CLI
// itself is given no Redis address or password.
func (h *harness) startStatusRelay() {
	h.t.Helper()
	cfg, err := stream.ConfigFromEnv(func(k string) string { return h.env[k] }, "viewer")
	if err != nil {
		h.t.Fatal(err)
	}
	rdb, err := stream.Open(context.Background(), cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = rdb.Close() })
	srv, err := relay.NewServer(relay.DefaultConfig("isched:lab:ingest"), credUID{}, nil, nil, nil, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	keys, _ := stream.NewKeys("lab")
	if err := srv.ServeQueries(relay.QueryConfig{Reader: rdb, Keys: keys}); err != nil {
		h.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	h.t.Cleanup(func() { cancel(); <-done })
	h.env["ISCHED_RELAY_ADDR"] = ln.Addr().String()
	delete(h.env, "ISCHED_REDIS_ADDR")
	delete(h.env, "ISCHED_REDIS_PASSWORD_FILE")
}

// runAs runs the CLI as a user, whose relay credential MUNGE would stamp
// with uid.
func (h *harness) runAs(user string, uid int, sl Slurm, args ...string) (int, string, string) {
	h.t.Helper()
	app := h.app()
	app.Username = func() string { return user }
	app.UID = func() int { return uid }
	app.Slurm = sl
	app.RelayCred = func(context.Context, string, int) (string, error) { return fmt.Sprintf("uid:%d", uid), nil }
	var out, errb strings.Builder
	code := app.Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestStatusPrivateThroughRelay: where Slurm's PrivateData hides jobs, bob's
// isched status reads through the relay with no Redis password and shows
// none of alice's job 42; alice still sees hers.
func TestStatusPrivateThroughRelay(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	h.startStatusRelay()
	sl := privateSlurm{fakeSlurm: h.slurm, items: []string{"jobs", "usage"}}
	code, out, errOut := h.runAs("bob", 1002, sl, "status")
	if code != 0 || !strings.Contains(out, "lab-other-1") || strings.Contains(out, "lab-train") {
		t.Errorf("bob's list: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = h.runAs("bob", 1002, sl, "status", "42")
	if code == 0 || strings.Contains(out, "alice") || strings.Contains(out, "7810") || !strings.Contains(errOut, "no such job") {
		t.Errorf("bob's status of alice's job 42: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = h.runAs("bob", 1002, sl, "status", "lab-train-abababab")
	if strings.Contains(out, "alice") || strings.Contains(out, "7810") {
		t.Errorf("bob's status of alice's lineage: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = h.runAs("alice", 1001, sl, "status", "42")
	if code != 0 || !strings.Contains(out, "7810/15630") {
		t.Errorf("alice's own status: exit %d\n%s%s", code, out, errOut)
	}
}

// TestStatusPrivateNeedsRelay: private with no relay_addr says what is
// missing; private_data = none keeps the viewer path; private_data = jobs
// goes through the relay whatever Slurm says.
func TestStatusPrivateNeedsRelay(t *testing.T) {
	h := newHarness(t)
	h.statusState()
	delete(h.env, "ISCHED_RELAY_ADDR")
	sl := privateSlurm{fakeSlurm: h.slurm, items: []string{"jobs"}}
	code, _, errOut := h.runAs("bob", 1002, sl, "status", "42")
	if code != 1 || !strings.Contains(errOut, "keeps each user's jobs private (Slurm's PrivateData=jobs)") || !strings.Contains(errOut, "no relay_addr") {
		t.Errorf("private, no relay: exit %d: %s", code, errOut)
	}
	h.env["ISCHED_PRIVATE_DATA"] = "none"
	if code, out, errOut := h.runAs("alice", 1001, sl, "status", "42"); code != 0 || !strings.Contains(out, "7810") {
		t.Errorf("private_data = none: exit %d: %s%s", code, out, errOut)
	}
	h.env["ISCHED_PRIVATE_DATA"] = "jobs"
	code, _, errOut = h.runAs("bob", 1002, privateSlurm{fakeSlurm: h.slurm}, "status", "42")
	if code != 1 || !strings.Contains(errOut, "private_data = jobs") {
		t.Errorf("private_data = jobs: exit %d: %s", code, errOut)
	}
}
