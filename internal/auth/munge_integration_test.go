//go:build integration

package auth_test

import (
	"context"
	"errors"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/testutil"
)

// asUser is a Munger whose credentials are made by another Unix user, the way
// a wrapper running in that user's job makes them.
type asUser struct {
	name string
	auth.ExecMunger
}

func (a asUser) Encode(ctx context.Context, p []byte, restrict int, ttl time.Duration) (string, error) {
	cmd := exec.CommandContext(ctx, "runuser", "-u", a.name, "--", "munge", "--restrict-uid="+strconv.Itoa(restrict), "--ttl=60")
	cmd.Stdin = strings.NewReader(string(p))
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

func uidOf(t *testing.T, name string) int {
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("test user %s: %v (scripts/dev-cluster up creates it)", name, err)
	}
	n, _ := strconv.Atoi(u.Uid)
	return n
}

// TestMungeBindsTheRealUser: a credential made by bob says bob, whatever job
// it claims, so bob cannot pass his session off as alice's.
func TestMungeBindsTheRealUser(t *testing.T) {
	testutil.NeedSlurm(t) // munged runs with the cluster
	ctx := context.Background()
	real := auth.ExecMunger{}
	for _, name := range []string{"alice", "bob"} {
		s, _ := auth.NewSession()
		cred, err := auth.Issue(ctx, asUser{name: name}, s, "lab", 7, "alice-run", 0, time.Minute, time.Now())
		if err != nil {
			t.Fatalf("%s issues: %v", name, err)
		}
		v, err := auth.Open(ctx, real, cred)
		if err != nil {
			t.Fatalf("open %s's credential: %v", name, err)
		}
		if v.UID != uidOf(t, name) {
			t.Errorf("credential made by %s carries uid %d, want %d", name, v.UID, uidOf(t, name))
		}
		// a credential can be opened once: a captured one cannot be replayed
		if _, err := auth.Open(ctx, real, cred); !errors.Is(err, auth.ErrCredential) || !errors.Is(err, auth.ErrReplayed) {
			t.Errorf("replayed credential of %s: %v, want refused as replayed", name, err)
		}
		// the coordinator reading the same stream entry again after a
		// crash: the real unmunge still tells who made it
		if again, err := auth.OpenRedelivered(ctx, real, cred); err != nil || again.UID != v.UID || again.SID != v.SID {
			t.Errorf("redelivered credential of %s: %+v, %v", name, again, err)
		}
	}
	// restricted to root: alice cannot open bob's credential to learn his key
	s, _ := auth.NewSession()
	cred, err := auth.Issue(ctx, asUser{name: "bob"}, s, "lab", 8, "bob-run", 0, time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "runuser", "-u", "alice", "--", "unmunge")
	cmd.Stdin = strings.NewReader(cred)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("alice opened a credential restricted to root: %s", out)
	}
}
