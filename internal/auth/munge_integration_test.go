//go:build integration

package auth_test

import (
	"context"
	"errors"
	"os"
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

// A negative restrict makes a credential without --restrict-uid.
func (a asUser) Encode(ctx context.Context, p []byte, restrict int, ttl time.Duration) (string, error) {
	args := []string{"-u", a.name, "--", "munge", "--ttl=60"}
	if restrict >= 0 {
		args = append(args, "--restrict-uid="+strconv.Itoa(restrict))
	}
	cmd := exec.CommandContext(ctx, "runuser", args...)
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

// TestMungeRestrictionSeen: the uid restriction bob puts on (or leaves off)
// a credential is what the unmunge command path reads, so the coordinator
// can refuse a start credential it did not need to be itself to open.
func TestMungeRestrictionSeen(t *testing.T) {
	testutil.NeedSlurm(t) // munged runs with the cluster
	checkRestrictions(t, auth.ExecMunger{})
}

// checkRestrictions has bob make credentials restricted to nobody, to
// alice and to this process's uid, opens them with m and checks the
// restriction m reports and RestrictedTo's verdict for this process. This
// munged refuses even root a credential restricted to another uid (MUNGE
// error 18), so only an unrestricted one opens and must be refused.
func checkRestrictions(t *testing.T, m auth.Munger) {
	t.Helper()
	ctx := context.Background()
	self := os.Geteuid()
	alice := uidOf(t, "alice")
	for _, tc := range []struct {
		restrict int
		ok       bool
	}{{-1, false}, {alice, false}, {self, true}} {
		s, _ := auth.NewSession()
		cred, err := auth.Issue(ctx, asUser{name: "bob"}, s, "lab", 9, "bob-run", tc.restrict, time.Minute, time.Now())
		if err != nil {
			t.Fatalf("bob issues (restrict %d): %v", tc.restrict, err)
		}
		v, err := auth.Open(ctx, m, cred)
		if tc.restrict == alice {
			if err == nil && v.RestrictedTo(self) == nil {
				t.Errorf("%T: a credential restricted to alice opened and passed as restricted to uid %d", m, self)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%T opens bob's credential (restrict %d): %v", m, tc.restrict, err)
		}
		want := tc.restrict
		if want < 0 {
			want = auth.NoRestriction
		}
		if v.RestrictUID != want || v.UID != uidOf(t, "bob") {
			t.Errorf("%T: bob's credential restricted to %d read as uid %d restricted to %d", m, tc.restrict, v.UID, v.RestrictUID)
		}
		if err := v.RestrictedTo(self); (err == nil) != tc.ok || (err != nil && !errors.Is(err, auth.ErrUnrestricted)) {
			t.Errorf("%T: restricted to %d, opened by uid %d: %v, want ok=%v", m, tc.restrict, self, err, tc.ok)
		}
	}
}
