package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/slurm"
)

// slurmTestdata is the captured 22.05 output in internal/slurm.
const slurmTestdata = "../../../../internal/slurm/testdata/22.05"

// TestFakeSlurmQueueParses: the queue the fake squeue serves is what the
// agent's parser reads back, job for job, and the sinfo and scontrol files
// are the captured ones.
func TestFakeSlurmQueueParses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := NewFakeSlurm(dir, slurmTestdata)
	if err != nil {
		t.Fatal(err)
	}
	limit := int64(2880)
	now := time.Now().Truncate(time.Second)
	var rows []report.Job
	for i := range 3 {
		rows = append(rows, report.Job{JobID: 10_000_000 + uint64(i), Name: "train", User: "alice", UID: 1001, Account: "bench",
			Partition: "gpu", State: "RUNNING", Reason: "None", Nodes: "gpu2", NodeCount: 1, CPUs: 4, Gres: "gpu:1",
			TimeLimitMin: &limit, SubmitMS: now.Add(-time.Minute).UnixMilli(), StartMS: now.UnixMilli(), Requeue: true})
	}
	if err := f.SetJobs(rows); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "squeue.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := slurm.ParseSqueue(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("parsed %d jobs, want %d", len(got), len(rows))
	}
	for i, g := range got {
		w := rows[i]
		if g.JobID != w.JobID || g.User != w.User || g.UID != w.UID || g.Partition != w.Partition || g.State != w.State ||
			g.Nodes != w.Nodes || g.Gres != w.Gres || g.CPUs != w.CPUs || g.StartMS != w.StartMS {
			t.Errorf("job %d: parsed %+v\nwant %+v", i, g, w)
		}
	}
	if err := f.SetJobs(nil); err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(filepath.Join(dir, "squeue.json"))
	if got, err := slurm.ParseSqueue(raw); err != nil || len(got) != 0 {
		t.Fatalf("empty queue: %d jobs, %v", len(got), err)
	}
	for _, name := range []string{"sinfo.json", "partitions.txt", "start.txt"} {
		a, _ := os.ReadFile(filepath.Join(dir, name))
		b, _ := os.ReadFile(filepath.Join(slurmTestdata, name))
		if len(a) == 0 || string(a) != string(b) {
			t.Errorf("%s: not the captured file", name)
		}
	}
	log := "squeue --all --json\nsqueue --all --start --noheader\nsinfo --all --json\nscontrol --all show partition --oneliner\nsqueue --all --json\nscancel 5\n"
	if err := os.WriteFile(filepath.Join(dir, "calls.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	calls, err := f.Calls()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"squeue --json": 2, "squeue --start": 1, "sinfo --json": 1, "scontrol partition": 1, "scancel": 1}
	if len(calls) != len(want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	for k, v := range want {
		if calls[k] != v {
			t.Fatalf("calls %v, want %v", calls, want)
		}
	}
}

func TestJudgeSoak(t *testing.T) {
	t.Parallel()
	series := func(coord func(i int) int64) []SoakSample {
		var out []SoakSample
		for i := range 20 {
			// a heap goal growing all along: shown, not judged
			out = append(out, SoakSample{At: time.Duration(i) * time.Minute, CoordRSS: coord(i), CoordHeapGoal: 1 << 30 * int64(1+i), JobKeys: 10_000})
		}
		return out
	}
	// a warm-up spike, then flat with noise: passes
	flat := series(func(i int) int64 {
		if i < 5 {
			return 200 << 20
		}
		return 100<<20 + int64(i%3)<<20
	})
	v := JudgeSoak(flat, 5*time.Minute)
	if len(v) != 2 || !v[0].Pass || !v[1].Pass || v[0].N != 15 || v[0].Name != "coordinator RSS" {
		t.Fatalf("flat (its heap goal growing, not judged): %+v", v)
	}
	// the live heap after a forced collection, judged when measured: on a
	// flat floor with in-flight reports caught now and then it passes, on a
	// rising one it fails
	withLive := func(live func(i int) int64) []SoakSample {
		s := slices.Clone(flat)
		for i := range s {
			s[i].CoordLiveHeap = live(i)
		}
		return s
	}
	v = JudgeSoak(withLive(func(i int) int64 { return 16<<20 + int64(i%4/3)*10<<20 }), 5*time.Minute)
	if len(v) != 3 || v[1].Name != "coordinator live heap" || !v[1].Pass || !v[1].Floor {
		t.Fatalf("flat live heap: %+v", v)
	}
	// the RSS rising with a backlog (a loaded machine) while the live heap
	// stays flat: the RSS is shown, not judged, where the live heap is
	backlog := withLive(func(i int) int64 { return 16 << 20 })
	for i := range backlog {
		backlog[i].CoordRSS = 100<<20 + int64(i)<<21
	}
	v = JudgeSoak(backlog, 5*time.Minute)
	if len(v) != 3 || v[0].Name != "coordinator RSS" || !v[0].Shown || v[0].Growth < SoakLimit || !v[1].Pass {
		t.Fatalf("RSS rising over a flat live heap: %+v", v)
	}
	v = JudgeSoak(withLive(func(i int) int64 { return 16<<20 + int64(i)<<19 }), 5*time.Minute)
	if len(v) != 3 || v[1].Pass || v[1].Growth < SoakLimit || !v[0].Pass {
		t.Fatalf("growing live heap under a flat RSS: %+v", v)
	}
	// 1% per sample after the warm-up: the last quarter is > 5% above the median
	growing := series(func(i int) int64 { return 100<<20 + int64(i)<<20 })
	v = JudgeSoak(growing, 5*time.Minute)
	if v[0].Pass || v[0].Growth < SoakLimit || !v[1].Pass {
		t.Fatalf("growing: %+v", v)
	}
	// a garbage collector's sawtooth: 20 % swings, the trough flat; the
	// peaks happen to fall late (the median of the last quarter is 20 %
	// above the first half's) — no leak, passes
	saw := series(func(i int) int64 {
		if i >= 15 || i%2 == 0 {
			return 120 << 20
		}
		return 100 << 20
	})
	saw[19].CoordRSS = 100 << 20
	if v := JudgeSoak(saw, 5*time.Minute); !v[0].Pass || !v[0].Floor || v[0].Growth != 0 {
		t.Fatalf("sawtooth with a flat floor: %+v", v)
	}
	// the same sawtooth on a rising floor (a leak under the collections): fails
	leak := series(func(i int) int64 { return 100<<20 + int64(i)<<20 + int64(i%2)*20<<20 })
	if v := JudgeSoak(leak, 5*time.Minute); v[0].Pass || v[0].Growth < SoakLimit {
		t.Fatalf("sawtooth on a rising floor: %+v", v)
	}
	// a job's keys: MEMORY USAGE stepping by an allocator size class as
	// the memory tracker's points fill (soak-ci's 8681 -> 9705 B) is shown,
	// not judged; the stored bytes less the points are judged: flat passes,
	// a record kept per sample (300 B each) fails
	keys := func(stored func(i int) float64) SoakVerdict {
		s := slices.Clone(flat)
		for i := range s {
			s[i].JobKeys, s[i].Bounded = 8681+float64(i/16)*1024, stored(i)
		}
		v := JudgeSoak(s, 5*time.Minute)
		if len(v) != 3 || !v[1].Shown || v[1].Growth < SoakLimit || v[2].Shown {
			t.Fatalf("job keys: %+v", v)
		}
		return v[2]
	}
	if v := keys(func(i int) float64 { return 6900 + float64(i%3) }); !v.Pass {
		t.Fatalf("flat stored bytes: %+v", v)
	}
	if v := keys(func(i int) float64 { return 6900 + float64(i)*300 }); v.Pass {
		t.Fatalf("300 B more per sample: %+v", v)
	}
	// too few samples after the warm-up: not judged
	if v := JudgeSoak(flat, 18*time.Minute); v[0].Pass || v[0].N != 2 {
		t.Fatalf("short: %+v", v)
	}
}

// TestJudgeSoakAgent: the agent's RSS as CI's soak-ci sampled it at
// 7952316 (every 5 s from 0 s, warm-up 30 s), flat yet judged +5.7 % by a
// minimum over the 9 samples of the first half against one over the last
// 4 — a minimum falls with the number of samples it is taken over. Compared
// over equal quarters it is +4.0 %; with the agent's live heap measured,
// that is judged and the RSS only shown.
func TestJudgeSoakAgent(t *testing.T) {
	t.Parallel()
	rss := []int64{27492352, 23142400, 27344896, 27344896, 26787840, 26812416, 26460160, 27631616, 27500544, 27238400, 25075712, 26374144,
		25489408, 26374144, 26308608, 26374144, 27619328, 27291648, 27672576, 24887296, 26505216, 26509312, 26505216, 26509312}
	samples := func(live func(i int) int64) []SoakSample {
		var out []SoakSample
		for i, r := range rss {
			out = append(out, SoakSample{At: time.Duration(i) * 5 * time.Second, CoordRSS: 48 << 20, AgentRSS: r, AgentLiveHeap: live(i), JobKeys: 8617})
		}
		return out
	}
	find := func(vs []SoakVerdict, name string) SoakVerdict {
		t.Helper()
		for _, v := range vs {
			if v.Name == name {
				return v
			}
		}
		t.Fatalf("no verdict %q in %+v", name, vs)
		return SoakVerdict{}
	}
	v := find(JudgeSoak(samples(func(int) int64 { return 0 }), 30*time.Second), "agent RSS")
	if !v.Pass || v.Shown || v.N != 18 || v.Base != 25489408 || v.Last != 26505216 {
		t.Errorf("agent RSS judged on equal quarters: %+v, want +4.0 %% (25489408 → 26505216), passed", v)
	}
	// live heap flat with a report batch caught now and then: judged, passes; RSS shown
	vs := JudgeSoak(samples(func(i int) int64 { return 6<<20 + int64(i%5/4)<<20 }), 30*time.Second)
	if v := find(vs, "agent live heap"); !v.Pass || v.Shown || !v.Floor {
		t.Errorf("flat agent live heap: %+v", v)
	}
	if v := find(vs, "agent RSS"); !v.Shown {
		t.Errorf("agent RSS judged while its live heap is: %+v", v)
	}
	// CI's soak-ci: the agent's 1.2 MiB live heap +5.1 % (62 KB) passes
	// under the grain; the same heap 400 KiB up fails
	for _, c := range []struct {
		last int64
		pass bool
	}{{1273744, true}, {1211856 + 400<<10, false}} {
		v := find(JudgeSoak(samples(func(i int) int64 {
			if i >= 18 {
				return c.last
			}
			return 1211856
		}), 30*time.Second), "agent live heap")
		if v.Pass != c.pass || v.Growth <= SoakLimit {
			t.Errorf("agent live heap 1211856 -> %d: %+v, want pass %v", c.last, v, c.pass)
		}
	}
	// a live heap rising 2 % a sample: fails whatever the RSS does
	v = find(JudgeSoak(samples(func(i int) int64 { return 6<<20 + int64(i)*(6<<20)/50 }), 30*time.Second), "agent live heap")
	if v.Pass || v.Growth < SoakLimit {
		t.Errorf("rising agent live heap: %+v", v)
	}
}

// ParseHeapAlloc reads a real heap profile (debug=1, captured from
// isched-coordinator -pprof during a soak: the head of its records and the
// MemStats it appends) and refuses what is not one.
func TestParseHeapAlloc(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("testdata", "heap-debug1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := ParseHeapAlloc(f)
	if err != nil || n != 19135376 {
		t.Fatalf("HeapAlloc %d, %v; want 19135376", n, err)
	}
	for _, bad := range []string{"", "go_memstats_heap_alloc_bytes 1\n", "# HeapAlloc = lots\n"} {
		if n, err := ParseHeapAlloc(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: %d, want an error", bad, n)
		}
	}
}
