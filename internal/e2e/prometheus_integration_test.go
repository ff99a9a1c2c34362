//go:build integration

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestPrometheusScrapesPerJobSeries: a real Prometheus (Debian's package,
// its own instance on a free port, temporary storage) scrapes the
// coordinator's and the agent's /metrics while a wrapped job runs; its HTTP
// API then has the job's per-lineage series (progress, ETA, RSS, iteration
// time) and the agent's poll and Slurm command series. The job writes large
// checkpoints: at its end the status shows the process memory as its peak,
// the page cache apart, and the efficiency verdict.
func TestPrometheusScrapesPerJobSeries(t *testing.T) {
	besideOthers(t)
	prom := testutil.NeedPrometheus(t)
	w := newWorld(t, fastPolicy)
	// the daemons again, with /metrics on ports the kernel picks
	w.coordArgs = []string{"-metrics-listen", "127.0.0.1:0"}
	w.agentArgs = []string{"-metrics-listen", "127.0.0.1:0"}
	for _, c := range []*exec.Cmd{w.coord, w.agent} {
		_ = c.Process.Signal(syscall.SIGTERM)
		_, _ = c.Process.Wait()
	}
	_ = os.Remove(filepath.Join(w.dir, "coordinator.log"))
	_ = os.Remove(filepath.Join(w.dir, "agent.log"))
	w.startAgent()
	w.startCoordinator()
	listen := regexp.MustCompile(`"msg":"metrics","listen":"([0-9.:]+)"|msg=metrics listen=([0-9.:]+)`)
	addrOf := func(file string) string {
		var addr string
		waitFor(t, w, 30*time.Second, file+"'s metrics address", func() bool {
			b, _ := os.ReadFile(filepath.Join(w.dir, file))
			if m := listen.FindStringSubmatch(string(b)); m != nil {
				addr = m[1] + m[2]
			}
			return addr != ""
		})
		return addr
	}
	coordAddr, agentAddr := addrOf("coordinator.log"), addrOf("agent.log")
	t.Logf("coordinator /metrics on %s, agent /metrics on %s", coordAddr, agentAddr)

	promAddr := startPrometheus(t, w, prom, coordAddr, agentAddr)

	lineage := fmt.Sprintf("prom%d", time.Now().UnixNano()%1e6)
	plan := report.Plan{Lineage: lineage, Ideal: "cpu", Total: 120}
	w.submitTrainer(plan, []string{"-p", "cpu", "-t", "5"},
		"--steps", "120", "--period", "0.25", "--mb", "100", "--ckpt-every", "20", "--ckpt-mb", "150")

	// the per-job series, through Prometheus
	sel := fmt.Sprintf(`{lineage=%q}`, lineage)
	for _, metric := range []string{"isched_job_progress_ratio", "isched_job_eta_seconds", "isched_job_rss_bytes", "isched_job_iteration_seconds"} {
		var v float64
		var labels map[string]string
		waitFor(t, w, 120*time.Second, metric+" of the job in Prometheus", func() bool {
			var ok bool
			labels, v, ok = promQuery(t, promAddr, metric+sel)
			return ok
		})
		t.Logf("%s%v = %g", metric, labels, v)
		if labels["user"] == "" || labels["partition"] != "cpu" || len(labels) != 6 { // + __name__, instance, job
			t.Errorf("%s labels %v, want lineage, user and partition (and Prometheus's own)", metric, labels)
		}
	}
	for _, q := range []string{"isched_agent_poll_duration_seconds_count", `isched_agent_slurm_commands_total{command="squeue"}`,
		`isched_coordinator_leader`} {
		waitFor(t, w, 60*time.Second, q+" > 0 in Prometheus", func() bool {
			_, v, ok := promQuery(t, promAddr, q)
			return ok && v > 0
		})
	}

	// the end: process memory, page cache apart, the verdict; the series go
	var st report.JobStatus
	waitFor(t, w, 150*time.Second, "the lineage to end", func() bool {
		var ok bool
		st, ok = w.status(lineage)
		return ok && st.State == "ENDED"
	})
	const mib = 1 << 20
	t.Logf("status: peak RSS %d MiB, cgroup peak %d MiB, unreclaimable peak %d MiB, page cache peak %d MiB; verdict %+v",
		st.PeakRSSBytes/mib, st.CgroupPeakBytes/mib, st.PeakUnreclaimBytes/mib, st.PeakPageCacheBytes/mib, st.Verdict)
	if st.PeakRSSBytes > 300*mib || st.PeakRSSBytes < 100*mib {
		t.Errorf("status peak %d MiB, want the process tree's (~100-200 MiB), not the checkpoints' page cache", st.PeakRSSBytes/mib)
	}
	if st.CgroupPeakBytes > 0 && st.PeakPageCacheBytes < 200*mib {
		t.Errorf("page cache peak %d MiB with a memory cgroup, want the 900 MiB of checkpoints to show", st.PeakPageCacheBytes/mib)
	}
	if v := st.Verdict; v == nil || v.MemRequestBytes != 1<<30 || !strings.Contains(v.Recommendation, "asked 1.0 GiB") {
		t.Errorf("verdict %+v, want one judging the job table's --mem=1G", v)
	}
	waitFor(t, w, 30*time.Second, "the ended lineage's series to go from the coordinator's /metrics", func() bool {
		b, err := httpGet("http://" + coordAddr + "/metrics")
		return err == nil && strings.Contains(b, "isched_coordinator_leader") && !strings.Contains(b, lineage)
	})
}

// startPrometheus runs prometheus on a free loopback port with a
// temporary config and storage, scraping the two addresses every second.
func startPrometheus(t *testing.T, w *world, bin, coordAddr, agentAddr string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"+
		"  - job_name: coordinator\n    static_configs:\n      - targets: [%q]\n"+
		"  - job_name: agent\n    static_configs:\n      - targets: [%q]\n", coordAddr, agentAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	for try := 0; try < 5; try++ {
		addr := freeAddr(t)
		log, _ := os.Create(filepath.Join(w.dir, fmt.Sprintf("prometheus-%d.log", try)))
		cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+addr, "--storage.tsdb.retention.time=1h")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatalf("prometheus: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				deadline = time.Time{} // the port was taken meanwhile: another
				continue
			default:
			}
			if b, err := httpGet("http://" + addr + "/-/ready"); err == nil && strings.Contains(b, "Ready") {
				t.Cleanup(func() {
					_ = cmd.Process.Signal(syscall.SIGTERM)
					select {
					case <-exited:
					case <-time.After(10 * time.Second):
						_ = cmd.Process.Kill()
						<-exited
					}
				})
				t.Logf("prometheus on %s", addr)
				return addr
			}
			time.Sleep(200 * time.Millisecond)
		}
		_ = cmd.Process.Kill()
		<-exited
	}
	b, _ := os.ReadFile(filepath.Join(w.dir, "prometheus-4.log"))
	t.Fatalf("prometheus did not become ready:\n%s", b)
	return ""
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpGet(u string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		return b.String(), fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return b.String(), nil
}

// promQuery runs an instant query; ok is true when it returned a series.
func promQuery(t *testing.T, addr, q string) (labels map[string]string, v float64, ok bool) {
	t.Helper()
	b, err := httpGet("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, 0, false
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal([]byte(b), &r) != nil || r.Status != "success" || len(r.Data.Result) == 0 {
		return nil, 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(s, 64)
	return r.Data.Result[0].Metric, v, err == nil
}
