package stream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

func writePass(t *testing.T, mode os.FileMode, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "u.pass")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKeys(t *testing.T) {
	t.Parallel()
	k, err := NewKeys("lab")
	if err != nil {
		t.Fatal(err)
	}
	for got, want := range map[string]string{
		k.Ingest():            "isched:lab:ingest",
		k.Actions():           "isched:lab:actions",
		k.Results():           "isched:lab:results",
		k.Snapshot():          "isched:lab:snapshot",
		k.Jobs():              "isched:lab:jobs",
		k.Agent("cursor"):     "isched:lab:agent:cursor",
		k.Job("L1", "state"):  "isched:lab:job:{L1}:state",
		k.Coordinator("lock"): "isched:lab:coord:lock",
		k.AgentCursor():       "isched:lab:agent:cursor",
		k.AgentDone():         "isched:lab:agent:done",
		k.AgentInflight():     "isched:lab:agent:inflight",
		k.JobState("L1"):      "isched:lab:job:{L1}:state",
		k.JobStatus("L1"):     "isched:lab:job:{L1}:status",
		k.JobSeries("L1"):     "isched:lab:job:{L1}:series",
		k.Leader():            "isched:lab:coord:leader",
		k.Sessions():          "isched:lab:coord:sessions",
		k.Lineages():          "isched:lab:coord:lineages",
		k.Receipts():          "isched:lab:coord:receipts",
	} {
		if got != want {
			t.Errorf("key %q, want %q", got, want)
		}
	}
	if got := k.JobKeys("L1"); !slices.Equal(got, []string{k.JobState("L1"), k.JobStatus("L1"), k.JobSeries("L1")}) {
		t.Errorf("JobKeys %q", got)
	}
	for _, bad := range []string{"", "a b", "x:y", "$(id)", string(make([]byte, 65))} {
		if _, err := NewKeys(bad); err == nil {
			t.Errorf("NewKeys(%q) accepted", bad)
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"ISCHED_REDIS_ADDR": "a:1, b:2", "ISCHED_CLUSTER": "c1", "ISCHED_REDIS_PASSWORD_DIR": "/x"}
	c, err := ConfigFromEnv(func(k string) string { return env[k] }, "agent")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Addrs) != 2 || c.Addrs[1] != "b:2" || c.Cluster != "c1" || c.PasswordFile != "/x/agent.pass" || c.User != "agent" {
		t.Errorf("config %+v", c)
	}
	for _, tc := range []struct{ key, value, want string }{
		{"ISCHED_CLUSTER", "bad name", "cluster name \"bad name\""},
		{"ISCHED_CLUSTER", "", "no cluster name: set ISCHED_CLUSTER"},
		{"ISCHED_REDIS_ADDR", "", "no Redis address: set ISCHED_REDIS_ADDR"},
		{"ISCHED_REDIS_ADDR", " , ", "no Redis address"},
	} {
		bad := maps.Clone(env)
		bad[tc.key] = tc.value
		_, err := ConfigFromEnv(func(k string) string { return bad[k] }, "agent")
		if !errors.Is(err, ErrConfig) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%s=%q: err %v, want ErrConfig saying %q", tc.key, tc.value, err, tc.want)
		}
	}
	// no password file or directory: no AUTH (no lab path assumed)
	delete(env, "ISCHED_REDIS_PASSWORD_DIR")
	if c, err := ConfigFromEnv(func(k string) string { return env[k] }, "agent"); err != nil || c.PasswordFile != "" {
		t.Errorf("without a password setting: file %q, err %v; want none", c.PasswordFile, err)
	}
}

func TestPasswordFileRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		mode    os.FileMode
		content string
		private bool
		wantErr bool
	}{
		{"private ok", 0o600, "s3cret\n", true, false},
		{"world readable refused for private", 0o644, "s3cret\n", true, true},
		{"group readable refused for private", 0o640, "s3cret\n", true, true},
		{"world readable ok for reporter", 0o644, "s3cret", false, false},
		{"empty", 0o600, "\n", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pw, err := readPassword(writePass(t, tc.mode, tc.content), tc.private)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && pw != "s3cret" {
				t.Errorf("password %q", pw)
			}
			if err != nil && !errors.Is(err, ErrConfig) {
				t.Errorf("error %v does not wrap ErrConfig", err)
			}
		})
	}
}

func openMini(t *testing.T) (*Client, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.RequireUserAuth("u", "pw")
	c, err := Open(context.Background(), Config{Addrs: []string{mr.Addr()}, User: "u", PasswordFile: writePass(t, 0o600, "pw"), Private: true, Cluster: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, mr
}

func TestStreamsOnMiniredis(t *testing.T) {
	t.Parallel()
	c, _ := openMini(t)
	ctx := context.Background()
	s := c.Keys().Ingest()
	var ids []string
	for _, p := range []string{"one", "two", "three"} {
		id, err := c.Append(ctx, s, []byte(p), "mac-"+p, 1000)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	got, err := c.ReadAfter(ctx, s, ids[0], 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Payload) != "two" || got[1].MAC != "mac-three" {
		t.Fatalf("ReadAfter: %+v", got)
	}
	if err := c.EnsureGroup(ctx, s, "g"); err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureGroup(ctx, s, "g"); err != nil {
		t.Fatalf("second EnsureGroup: %v", err)
	}
	got, err = c.ReadGroup(ctx, s, "g", "c1", 10, 10*time.Millisecond)
	if err != nil || len(got) != 3 || got[0].Redelivered {
		t.Fatalf("ReadGroup: %v %+v (new entries are not redelivered)", err, got)
	}
	if err := c.Ack(ctx, s, "g", got[0].ID); err != nil {
		t.Fatal(err)
	}
	// c1 died holding two entries: c2 claims them
	claimed, err := c.Claim(ctx, s, "g", "c2", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 2 || string(claimed[0].Payload) != "two" || !claimed[0].Redelivered || !claimed[1].Redelivered {
		t.Fatalf("Claim: %+v", claimed)
	}
	if _, err := c.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get missing: %v", err)
	}
	if err := c.Set(ctx, c.Keys().Snapshot(), []byte("snap"), 0); err != nil {
		t.Fatal(err)
	}
	if b, err := c.Get(ctx, c.Keys().Snapshot()); err != nil || string(b) != "snap" {
		t.Errorf("Get: %q %v", b, err)
	}
	ok, err := c.SetNX(ctx, "k", []byte("1"), 0)
	ok2, err2 := c.SetNX(ctx, "k", []byte("2"), 0)
	if err != nil || err2 != nil || !ok || ok2 {
		t.Errorf("SetNX: %v %v %v %v", ok, err, ok2, err2)
	}
}

func TestOpenFailsClearly(t *testing.T) {
	t.Parallel()
	_, mr := openMini(t)
	_, err := Open(context.Background(), Config{Addrs: []string{mr.Addr()}, User: "u", PasswordFile: writePass(t, 0o600, "wrong"), Cluster: "lab"})
	if err == nil {
		t.Fatal("wrong password accepted")
	}
	_, err = Open(context.Background(), Config{Addrs: []string{mr.Addr()}, User: "u", PasswordFile: writePass(t, 0o644, "pw"), Private: true, Cluster: "lab"})
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("world-readable private credentials: %v", err)
	}
}

func TestLockAndLists(t *testing.T) {
	t.Parallel()
	c, mr := openMini(t)
	ctx := context.Background()
	ok, err := c.Lock(ctx, "L", "a", time.Second)
	if err != nil || !ok {
		t.Fatalf("a takes the lock: %v %v", ok, err)
	}
	if ok, _ := c.Lock(ctx, "L", "b", time.Second); ok {
		t.Fatal("b took a held lock")
	}
	if ok, _ := c.Lock(ctx, "L", "a", time.Second); !ok {
		t.Fatal("a could not renew")
	}
	mr.FastForward(2 * time.Second)
	if ok, _ := c.Lock(ctx, "L", "b", time.Second); !ok {
		t.Fatal("b could not take an expired lock")
	}
	if err := c.Unlock(ctx, "L", "a"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.Lock(ctx, "L", "a", time.Second); ok {
		t.Fatal("a's unlock released b's lock")
	}
	for i := range 5 {
		if err := c.PushList(ctx, "list", 3, []byte{byte('0' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.List(ctx, "list")
	if err != nil || len(got) != 3 || string(got[0]) != "2" || string(got[2]) != "4" {
		t.Fatalf("bounded list: %q %v", got, err)
	}
	s := "st"
	_, _ = c.Append(ctx, s, []byte("x"), "", 0)
	_ = c.EnsureGroup(ctx, s, "g")
	if _, err := c.ReadGroup(ctx, s, "g", "me", 10, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	pend, err := c.ReadOwnPending(ctx, s, "g", "me", 10)
	if err != nil || len(pend) != 1 || string(pend[0].Payload) != "x" || !pend[0].Redelivered {
		t.Fatalf("own pending: %v %+v", err, pend)
	}
}
