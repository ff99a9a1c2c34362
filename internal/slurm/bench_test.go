package slurm

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// scaledSqueue builds a `squeue --json` document of n jobs by repeating the
// jobs of the real 22.05 capture with fresh job ids, so the benchmark parses
// Slurm's real layout (~3.6 KB and ~110 members per job) at scale. The
// document is generated, not committed.
func scaledSqueue(tb testing.TB, n int) []byte {
	tb.Helper()
	var doc struct {
		Meta   json.RawMessage              `json:"meta"`
		Errors json.RawMessage              `json:"errors"`
		Jobs   []map[string]json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(readFile(tb, "squeue.json"), &doc); err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	buf.WriteString(`{"meta": `)
	buf.Write(doc.Meta)
	buf.WriteString(`, "errors": [], "jobs": [`)
	for i := 0; i < n; i++ {
		j := doc.Jobs[i%len(doc.Jobs)]
		j["job_id"] = json.RawMessage(strconv.Itoa(1000 + i))
		b, err := json.MarshalIndent(j, "   ", "  ") // squeue indents too
		if err != nil {
			tb.Fatal(err)
		}
		if i > 0 {
			buf.WriteString(",\n")
		}
		buf.Write(b)
	}
	buf.WriteString("]}\n")
	return buf.Bytes()
}

// BenchmarkParseSqueue10k: target < 200 ms and < 200 MB per 10,000 jobs.
func BenchmarkParseSqueue10k(b *testing.B) {
	in := scaledSqueue(b, 10000)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		jobs, err := ParseSqueue(in)
		if err != nil {
			b.Fatal(err)
		}
		if len(jobs) != 10000 {
			b.Fatalf("%d jobs", len(jobs))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
	b.Logf("input %.1f MB", float64(len(in))/1e6)
}

func TestScaledSqueueParses(t *testing.T) {
	jobs, err := ParseSqueue(scaledSqueue(t, 50))
	if err != nil || len(jobs) != 50 || jobs[49].JobID != 1049 {
		t.Fatalf("%d jobs, %v", len(jobs), err)
	}
}
