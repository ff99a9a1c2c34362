//go:build integration && cgo && libmunge

package auth_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/testutil"
)

// unmungeAs runs the unmunge command as a Unix user and returns its output.
func unmungeAs(ctx context.Context, name, cred string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "runuser", "-u", name, "--", "unmunge", "--numeric")
	cmd.Stdin = strings.NewReader(cred)
	return cmd.CombinedOutput()
}

// metaField is a "KEY: value" line of unmunge's metadata.
func metaField(out []byte, key string) string {
	meta, _, _ := bytes.Cut(out, []byte("\n\n"))
	for _, line := range strings.Split(string(meta), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestLibMungeMatchesTheCommands: the in-process Munger and the munge and
// unmunge commands read each other's credentials with the same verdicts —
// who made it, its payload, once only (munged's replay cache is the same),
// the uid restriction and the TTL asked for — so the coordinator may use
// either.
func TestLibMungeMatchesTheCommands(t *testing.T) {
	testutil.NeedSlurm(t) // munged runs with the cluster
	ctx := context.Background()
	lib, cmds := auth.LibMunger{}, auth.ExecMunger{}
	if _, ok := auth.DefaultMunger("").(auth.LibMunger); !ok || auth.MungerKind != "libmunge" {
		t.Fatalf("DefaultMunger is %T (%s) in a libmunge build", auth.DefaultMunger(""), auth.MungerKind)
	}

	// made by alice and bob with the munge command, opened in-process
	for _, name := range []string{"alice", "bob"} {
		s, _ := auth.NewSession()
		cred, err := auth.Issue(ctx, asUser{name: name}, s, "lab", 7, name+"-run", 0, time.Minute, time.Now())
		if err != nil {
			t.Fatalf("%s issues: %v", name, err)
		}
		v, err := auth.Open(ctx, lib, cred)
		if err != nil {
			t.Fatalf("libmunge opens %s's credential: %v", name, err)
		}
		if v.UID != uidOf(t, name) || v.SID != s.SID || !bytes.Equal(v.Key, s.Key) || v.Lineage != name+"-run" {
			t.Errorf("libmunge read %s's credential as uid %d sid %s lineage %s", name, v.UID, v.SID, v.Lineage)
		}
		// once only, whichever opens it the second time
		for _, m := range []auth.Munger{lib, cmds} {
			if _, err := auth.Open(ctx, m, cred); !errors.Is(err, auth.ErrCredential) || !errors.Is(err, auth.ErrReplayed) {
				t.Errorf("%T: replayed credential of %s: %v, want refused as replayed", m, name, err)
			}
			again, err := auth.OpenRedelivered(ctx, m, cred)
			if err != nil || again.UID != v.UID || again.SID != v.SID {
				t.Errorf("%T: redelivered credential of %s: %+v, %v", m, name, again, err)
			}
		}
	}

	// made in-process, opened by the command: payload, uid, restriction, TTL
	bob := uidOf(t, "bob")
	payload := []byte("isched \x00 payload\n" + strings.Repeat("x", 3000))
	cred, err := lib.Encode(ctx, payload, bob, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := unmungeAs(ctx, "alice", cred); err == nil {
		t.Errorf("alice opened a credential restricted to bob: %s", out)
	}
	out, err := unmungeAs(ctx, "bob", cred)
	if err != nil {
		t.Fatalf("bob cannot open a credential restricted to him: %v: %s", err, out)
	}
	if _, got, _ := bytes.Cut(out, []byte("\n\n")); !bytes.Equal(got, payload) {
		t.Errorf("payload through libmunge and unmunge: %d bytes, want %d", len(got), len(payload))
	}
	if ttl := metaField(out, "TTL"); ttl != "90" {
		t.Errorf("TTL %q, want 90", ttl)
	}
	if uid := metaField(out, "UID"); !strings.HasPrefix(uid, "0") {
		t.Errorf("made by uid %q, want 0 (this test runs as root)", uid)
	}
	if rid := metaField(out, "UID_RESTRICTION"); rid != strconv.Itoa(bob) {
		t.Errorf("restricted to %q, want %d", rid, bob)
	}

	// an empty payload, and what is not a credential
	cred, err = lib.Encode(ctx, nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lib.Decode(ctx, cred); err != nil || len(d.Payload) != 0 || d.UID != 0 || d.RestrictUID != 0 {
		t.Errorf("empty payload: %+v %v", d, err)
	}
	for _, bad := range []string{"MUNGE:garbage:", "not a credential", cred[:len(cred)/2] + ":"} {
		if d, err := lib.Decode(ctx, bad); err == nil || errors.Is(err, auth.ErrReplayed) || d.Payload != nil || !strings.Contains(err.Error(), "munge error") {
			t.Errorf("decode %q: payload %q, %v; want a MUNGE error", bad, d.Payload, err)
		}
	}
	// a socket no munged listens on: an error naming it, not a hang
	dead := auth.LibMunger{Socket: t.TempDir() + "/none.socket"}
	if _, err := dead.Decode(ctx, cred); err == nil || !strings.Contains(err.Error(), "munge error") {
		t.Errorf("decode on a dead socket: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := lib.Decode(cctx, cred); !errors.Is(err, context.Canceled) {
		t.Errorf("decode with a cancelled context: %v", err)
	}
}

// cpuTime is the user and system CPU time of this process and of its
// waited-for children.
func cpuTime(tb testing.TB) time.Duration {
	var t time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			tb.Fatal(err)
		}
		t += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return t
}

// BenchmarkOpenCredential is what the coordinator pays for a start
// report's credential: the unmunge command against libmunge in-process
// (credentials made beforehand, outside the timer; each opens once).
func BenchmarkOpenCredential(b *testing.B) {
	testutil.NeedSlurm(b)
	ctx := context.Background()
	for _, m := range []struct {
		name string
		m    auth.Munger
	}{{"commands", auth.ExecMunger{}}, {"libmunge", auth.LibMunger{}}} {
		b.Run(m.name, func(b *testing.B) {
			creds := make([]string, b.N)
			for i := range creds {
				s, _ := auth.NewSession()
				c, err := auth.Issue(ctx, auth.LibMunger{}, s, "lab", uint64(i+1), "bench", 0, time.Minute, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				creds[i] = c
			}
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := auth.Open(ctx, m.m, creds[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			// the CPU the coordinator's host spends: this process and the
			// unmunge processes it waited for (munged's own work is the same
			// for both)
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// TestLibMungeRestrictionSeen: libmunge's MUNGE_OPT_UID_RESTRICTION after
// a decode says what unmunge's UID_RESTRICTION says (checkRestrictions).
func TestLibMungeRestrictionSeen(t *testing.T) {
	testutil.NeedSlurm(t)
	checkRestrictions(t, auth.LibMunger{})
}
