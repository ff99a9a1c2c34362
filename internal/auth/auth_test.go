package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeMunger seals payloads in memory, recording who made each credential.
type fakeMunger struct {
	uid      int
	creds    map[string][]byte
	uids     map[string]int
	restrict map[string]int
}

func (f *fakeMunger) Encode(_ context.Context, p []byte, restrict int, _ time.Duration) (string, error) {
	if f.creds == nil {
		f.creds, f.uids, f.restrict = map[string][]byte{}, map[string]int{}, map[string]int{}
	}
	c := "MUNGE:" + string(rune('a'+len(f.creds))) + ":"
	f.creds[c], f.uids[c], f.restrict[c] = append([]byte(nil), p...), f.uid, restrict
	return c, nil
}

func (f *fakeMunger) Decode(_ context.Context, c string) (Decoded, error) {
	p, ok := f.creds[c]
	if !ok {
		return Decoded{}, errors.New("invalid credential")
	}
	return Decoded{Payload: p, UID: f.uids[c], GID: f.uids[c], RestrictUID: f.restrict[c]}, nil
}

func TestIssueOpenRoundTrip(t *testing.T) {
	t.Parallel()
	s, err := NewSession()
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeMunger{uid: 1001}
	cred, err := Issue(context.Background(), m, s, "lab", 42, "L-1", 0, time.Minute, time.UnixMilli(1000))
	if err != nil {
		t.Fatal(err)
	}
	v, err := Open(context.Background(), m, cred)
	if err != nil {
		t.Fatal(err)
	}
	if v.UID != 1001 || v.JobID != 42 || v.Lineage != "L-1" || v.SID != s.SID || string(v.Key) != string(s.Key) {
		t.Fatalf("verified %+v", v)
	}
	msg := []byte(`{"v":1}`)
	if err := Verify(v.Key, msg, s.Sign(msg)); err != nil {
		t.Errorf("own signature rejected: %v", err)
	}
	other, _ := NewSession()
	if err := Verify(v.Key, msg, other.Sign(msg)); !errors.Is(err, ErrBadMAC) {
		t.Errorf("foreign key accepted: %v", err)
	}
	if err := Verify(v.Key, []byte(`{"v":2}`), s.Sign(msg)); !errors.Is(err, ErrBadMAC) {
		t.Errorf("altered message accepted: %v", err)
	}
	if err := Verify(v.Key, msg, "zz"); !errors.Is(err, ErrBadMAC) {
		t.Errorf("garbage mac accepted: %v", err)
	}
}

func TestOpenRejects(t *testing.T) {
	t.Parallel()
	good := Claims{V: 1, SID: strings.Repeat("ab", 16), Cluster: "lab", JobID: 1, Lineage: "x", Key: strings.Repeat("00", KeySize)}
	cases := map[string]func(c *Claims) string{
		"version":    func(c *Claims) string { c.V = 2; return "" },
		"sid":        func(c *Claims) string { c.SID = "nothex"; return "" },
		"job id":     func(c *Claims) string { c.JobID = 0; return "" },
		"short key":  func(c *Claims) string { c.Key = "00"; return "" },
		"extra json": func(c *Claims) string { return `{"v":1,"evil":true}` },
		"not json":   func(c *Claims) string { return `garbage` },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := good
			raw := mutate(&c)
			if raw == "" {
				b, _ := json.Marshal(c)
				raw = string(b)
			}
			m := &fakeMunger{}
			cred, _ := m.Encode(context.Background(), []byte(raw), 0, 0)
			if _, err := Open(context.Background(), m, cred); !errors.Is(err, ErrCredential) {
				t.Errorf("err %v, want ErrCredential", err)
			}
		})
	}
	if _, err := Open(context.Background(), &fakeMunger{}, "MUNGE:unknown:"); !errors.Is(err, ErrCredential) {
		t.Errorf("unknown credential: %v", err)
	}
	if _, err := Open(context.Background(), &fakeMunger{}, ""); !errors.Is(err, ErrCredential) {
		t.Errorf("empty credential: %v", err)
	}
}

func TestParseUnmunge(t *testing.T) {
	t.Parallel()
	ok := "STATUS:          0\nENCODE_HOST:     127.0.0.1\nUID:             1001\nGID:             1002\nUID_RESTRICTION: 0\nLENGTH:          3\n\nabc"
	d, err := parseUnmunge([]byte(ok), false)
	if err != nil || string(d.Payload) != "abc" || d.UID != 1001 || d.GID != 1002 || d.RestrictUID != 0 {
		t.Fatalf("parse: %+v %v", d, err)
	}
	// no UID_RESTRICTION line: made without --restrict-uid, anyone may open it
	open := strings.Replace(ok, "UID_RESTRICTION: 0\n", "", 1)
	if d, err := parseUnmunge([]byte(open), false); err != nil || d.RestrictUID != NoRestriction {
		t.Errorf("unrestricted: %+v %v, want RestrictUID %d", d, err, NoRestriction)
	}
	for name, in := range map[string]string{
		"no separator": "STATUS: 0\nUID: 1\nGID: 1\n",
		"failed":       "STATUS: Replayed credential (17)\nUID: 1\nGID: 1\n\nabc",
		"no uid":       "STATUS: 0\nGID: 1\n\nabc",
		"bad uid":      "STATUS: 0\nUID: x\nGID: 1\n\nabc",
		"bad restrict": "STATUS: 0\nUID: 1\nGID: 1\nUID_RESTRICTION: any\n\nabc",
	} {
		if _, err := parseUnmunge([]byte(in), false); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// a replayed credential's output: read only when asked for
	replayed := strings.Replace(ok, "STATUS:          0", "STATUS:          17", 1)
	if d, err := parseUnmunge([]byte(replayed), true); err != nil || string(d.Payload) != "abc" || d.UID != 1001 {
		t.Errorf("replayed: %+v %v", d, err)
	}
	if _, err := parseUnmunge([]byte(ok), true); err == nil {
		t.Error("a success status read as a replay")
	}
	if _, err := parseUnmunge([]byte("STATUS: 15\nUID: 1\nGID: 1\n\nabc"), true); err == nil {
		t.Error("an expired credential (15) read as a replay")
	}
}

// replayMunger opens each credential once, then answers ErrReplayed with
// what it decoded, as MUNGE does.
type replayMunger struct {
	fakeMunger
	opened map[string]bool
}

func (r *replayMunger) Decode(ctx context.Context, c string) (Decoded, error) {
	d, err := r.fakeMunger.Decode(ctx, c)
	if err != nil {
		return Decoded{}, err
	}
	if r.opened[c] {
		return d, fmt.Errorf("%w: unmunge: exit status 17", ErrReplayed)
	}
	if r.opened == nil {
		r.opened = map[string]bool{}
	}
	r.opened[c] = true
	return d, nil
}

// A credential opened once is refused by Open and accepted by
// OpenRedelivered with the same claims and uid; OpenRedelivered keeps
// every other check.
func TestOpenRedelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := &replayMunger{fakeMunger: fakeMunger{uid: 1001}}
	s, _ := NewSession()
	cred, err := Issue(ctx, m, s, "lab", 7, "run", 0, time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	first, err := Open(ctx, m, cred)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, m, cred); !errors.Is(err, ErrCredential) || !errors.Is(err, ErrReplayed) {
		t.Errorf("Open of a replayed credential: %v, want ErrCredential and ErrReplayed", err)
	}
	again, err := OpenRedelivered(ctx, m, cred)
	if err != nil || again.SID != first.SID || again.UID != 1001 || !bytes.Equal(again.Key, first.Key) {
		t.Errorf("OpenRedelivered: %+v, %v; want the first opening's claims", again, err)
	}
	if _, err := OpenRedelivered(ctx, m, "MUNGE:unknown:"); !errors.Is(err, ErrCredential) {
		t.Errorf("OpenRedelivered of an unknown credential: %v", err)
	}
	bad, _ := m.Encode(ctx, []byte(`{"v":1,"sid":"nope"}`), 0, 0)
	_, _ = Open(ctx, m, bad)
	if _, err := OpenRedelivered(ctx, m, bad); !errors.Is(err, ErrCredential) {
		t.Errorf("OpenRedelivered of malformed claims: %v", err)
	}
}

// RestrictedTo accepts only a credential restricted to the given uid: one
// anybody may open, or one restricted to another uid (opened only because
// the opener is root), exposes the session key.
func TestRestrictedTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		restrict int
		ok       bool
	}{{500, true}, {NoRestriction, false}, {0, false}, {1001, false}} {
		m := &fakeMunger{uid: 1001}
		s, _ := NewSession()
		cred, err := Issue(ctx, m, s, "lab", 7, "run", tc.restrict, time.Minute, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		v, err := Open(ctx, m, cred)
		if err != nil {
			t.Fatal(err)
		}
		err = v.RestrictedTo(500)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrUnrestricted)) {
			t.Errorf("restricted to %d, opened by 500: %v, want ok=%v (ErrUnrestricted)", tc.restrict, err, tc.ok)
		}
	}
}
