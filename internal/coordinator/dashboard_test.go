package coordinator

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/isched/isched/internal/agent"
)

// exported lists the metric names the coordinator and the agent export.
func exported() map[string]bool {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		NewMetrics().Describe(ch)
		agent.NewMetrics().Describe(ch)
		close(ch)
	}()
	fq := regexp.MustCompile(`fqName: "([a-z_:]+)"`)
	out := map[string]bool{}
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// TestDashboardMetricsExist: dashboards/isched.json is valid JSON, each of
// its panels has queries, and every isched_* metric a query names is one the
// coordinator or the agent exports (histograms by their _bucket, _sum and
// _count series).
func TestDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "dashboards", "isched.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboards/isched.json: %v", err)
	}
	have := exported()
	name := regexp.MustCompile(`isched_[a-z_]+`)
	var exprs []string
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	var used []string
	for _, e := range exprs {
		for _, n := range name.FindAllString(e, -1) {
			base := n
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(n, suf); ok && have[b] {
					base = b
				}
			}
			if !have[base] {
				t.Errorf("the dashboard queries %s, which nothing exports", n)
			}
			used = append(used, base)
		}
	}
	for _, want := range []string{"isched_job_progress_ratio", "isched_job_eta_seconds", "isched_job_rss_bytes", "isched_job_gpu_memory_bytes",
		"isched_job_iteration_seconds", "isched_agent_poll_duration_seconds", "isched_agent_slurm_command_errors_total", "isched_agent_actions_total"} {
		if !slices.Contains(used, want) {
			t.Errorf("the dashboard shows no %s", want)
		}
	}
}
