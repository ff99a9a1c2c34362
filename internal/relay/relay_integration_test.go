//go:build integration

package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/relayproto"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/internal/testutil"
)

// mungeAs makes MUNGE credentials as a test user, the way a wrapper in
// that user's job makes them (the real munge command, run by runuser).
type mungeAs struct{ name string }

func (m mungeAs) Encode(ctx context.Context, p []byte, restrict int, ttl time.Duration) (string, error) {
	cmd := exec.CommandContext(ctx, "runuser", "-u", m.name, "--", "munge", "--restrict-uid="+strconv.Itoa(restrict), "--ttl="+strconv.Itoa(int(ttl.Seconds())))
	cmd.Stdin = strings.NewReader(string(p))
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("munge as %s: %w", m.name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func (mungeAs) Decode(context.Context, string) (auth.Decoded, error) {
	return auth.Decoded{}, errors.New("mungeAs only encodes")
}

func uidOf(t *testing.T, name string) int {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("test user %s: %v (scripts/dev-cluster up creates alice and bob)", name, err)
	}
	n, _ := strconv.Atoi(u.Uid)
	return n
}

// realRelay is a relay on the dev cluster's Redis (as the reporter) and
// munged, on a cluster name of its own so that no running coordinator
// reads what the test appends.
type realRelay struct {
	addr, cluster string
	admin         *stream.Client
	keys          stream.Keys
}

func startRealRelay(t *testing.T, ration Ration) realRelay {
	t.Helper()
	testutil.NeedSlurm(t) // munged runs with the cluster
	r := testutil.NeedRedis(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cluster := "relay-it-" + hex.EncodeToString(b)
	cfg, err := stream.ConfigFromEnv(func(k string) string {
		return map[string]string{"ISCHED_REDIS_ADDR": r.Addr, "ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile("reporter"), "ISCHED_CLUSTER": cluster}[k]
	}, "reporter")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := stream.Open(context.Background(), cfg) // the dev cluster's reporter.pass is 0644 by design
	if err != nil {
		t.Fatalf("redis as reporter: %v", err)
	}
	t.Cleanup(func() { _ = rep.Close() })
	keys, _ := stream.NewKeys(cluster)
	admin := r.Client(t, "admin", cluster)
	t.Cleanup(func() { _ = admin.Del(context.Background(), keys.Ingest()) })
	c := DefaultConfig(keys.Ingest())
	c.Ration = ration
	v := MungeVerifier{Munger: auth.DefaultMunger(""), UID: os.Getuid(), Cluster: cluster}
	srv, err := NewServer(c, v, rep, nil, NewMetrics(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return realRelay{addr: ln.Addr().String(), cluster: cluster, admin: admin, keys: keys}
}

// TestWrapperReportsThroughRelay: the real wrapper, run as alice with
// ISCHED_RELAY_ADDR and no Redis password at all, reports through the
// relay; the coordinator's read (its consumer group, entries bounded in
// Redis) gets the reports, the start's MUNGE credential says alice, and
// every report's MAC holds under the session key it seals.
func TestWrapperReportsThroughRelay(t *testing.T) {
	rr := startRealRelay(t, DefaultRation)
	bin := testutil.Binary(t, "isched-wrapper", "./wrapper")
	alice := uidOf(t, "alice")
	jobID := 900000000 + time.Now().UnixNano()%1000000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "runuser", "-u", "alice", "--", "env", "-i", "PATH=/usr/bin:/bin", "TMPDIR=/tmp",
		"SLURM_JOB_ID="+strconv.FormatInt(jobID, 10), "SLURM_CLUSTER_NAME="+rr.cluster, "SLURM_JOB_USER=alice", "SLURM_JOB_UID="+strconv.Itoa(alice),
		"ISCHED_CLUSTER="+rr.cluster, "ISCHED_RELAY_ADDR="+rr.addr, "ISCHED_COORDINATOR_UID="+strconv.Itoa(os.Getuid()),
		"ISCHED_REDIS_PASSWORD_DIR=/nonexistent", // no Redis password: only the relay can deliver
		bin, "--interval", "100ms", "--report-interval", "200ms", "--", "sleep", "1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("wrapper as alice: %v\n%s", err, out)
	}
	// the coordinator's read: its group, entries checked inside Redis
	r := testutil.NeedRedis(t)
	coordCfg, err := stream.ConfigFromEnv(func(k string) string {
		return map[string]string{"ISCHED_REDIS_ADDR": r.Addr, "ISCHED_REDIS_PASSWORD_FILE": r.PasswordFile("coordinator"), "ISCHED_CLUSTER": rr.cluster}[k]
	}, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	coordCfg.MaxEntry = report.MaxPayload
	coord, err := stream.Open(ctx, coordCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	if err := coord.EnsureGroup(ctx, rr.keys.Ingest(), "coord"); err != nil {
		t.Fatal(err)
	}
	ents, err := coord.ReadGroup(ctx, rr.keys.Ingest(), "coord", "c1", 512, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) < 2 {
		t.Fatalf("%d entries through the relay, want a start and an end at least\n%s", len(ents), out)
	}
	var key []byte
	kinds := map[report.Kind]int{}
	for i, e := range ents {
		env, err := report.Decode(e.Payload)
		if err != nil {
			t.Fatalf("entry %s: %v", e.ID, err)
		}
		kinds[env.Kind]++
		if i == 0 {
			if env.Kind != report.KindStart {
				t.Fatalf("first entry is %s, want start", env.Kind)
			}
			v, err := auth.Open(ctx, auth.DefaultMunger(""), env.Start.Cred)
			if err != nil {
				t.Fatalf("start credential: %v", err)
			}
			if v.UID != alice || v.JobID != uint64(jobID) {
				t.Fatalf("start credential of uid %d job %d, want alice (%d) job %d", v.UID, v.JobID, alice, jobID)
			}
			key = v.Key
			continue
		}
		if err := auth.Verify(key, e.Payload, e.MAC); err != nil {
			t.Fatalf("entry %s (%s): %v", e.ID, env.Kind, err)
		}
	}
	if kinds[report.KindEnd] != 1 {
		t.Errorf("kinds %v: want one end report", kinds)
	}
}

// TestBobCannotTrimOrStarveThroughRelay: bob, with real credentials of
// his, floods the relay while alice reports: he is throttled, alice never
// is, and nothing of alice's is trimmed or lost (the stream only grows:
// the relay's cap is its own, far above what this appends).
func TestBobCannotTrimOrStarveThroughRelay(t *testing.T) {
	rr := startRealRelay(t, Ration{EntriesPerSec: 20, EntryBurst: 40, BytesPerSec: 1 << 20, ByteBurst: 4 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := func(name string) *relayproto.Client {
		c := &relayproto.Client{Addr: rr.addr, Cred: func(ctx context.Context) (string, error) {
			return relayproto.Credential(ctx, mungeAs{name}, rr.cluster, os.Getuid(), time.Now())
		}}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	bob, alice := client("bob"), client("alice")
	if err := bob.Connect(ctx); err != nil {
		t.Fatalf("bob connects: %v", err)
	}
	if err := alice.Connect(ctx); err != nil {
		t.Fatalf("alice connects: %v", err)
	}
	var wg sync.WaitGroup
	var bobOK, bobThrottled int
	var bobErr error
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // bob floods until alice is done
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := bob.Append(ctx, "isched:"+rr.cluster+":ingest", []byte(`{"bob":"flood"}`), testMAC, 0)
			switch {
			case err == nil:
				bobOK++
			case refusal(err) == relayproto.CodeThrottled:
				bobThrottled++
			default:
				bobErr = err
				return
			}
		}
	}()
	const aliceN = 30
	var aliceIDs []string
	for i := range aliceN {
		id, err := alice.Append(ctx, "", []byte(fmt.Sprintf(`{"alice":%d}`, i)), testMAC, 0)
		if err != nil {
			t.Fatalf("alice's report %d refused while bob floods: %v", i, err)
		}
		aliceIDs = append(aliceIDs, id)
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if bobErr != nil {
		t.Fatalf("bob's flood: %v", bobErr)
	}
	if bobThrottled == 0 {
		t.Fatalf("bob appended %d and was never throttled", bobOK)
	}
	// everything that was accepted is there: nothing trimmed
	n, err := rr.admin.Len(ctx, rr.keys.Ingest())
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(bobOK+aliceN) {
		t.Fatalf("stream holds %d entries, want bob's %d + alice's %d", n, bobOK, aliceN)
	}
	ents, err := rr.admin.Range(ctx, rr.keys.Ingest(), "-", "+", n)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range ents {
		if strings.HasPrefix(string(e.Payload), `{"alice":`) {
			found++
		}
	}
	if found != aliceN {
		t.Fatalf("%d of alice's %d reports in the stream", found, aliceN)
	}
	t.Logf("bob: %d appended, %d throttled; alice: %d of %d appended", bobOK, bobThrottled, found, aliceN)
}
