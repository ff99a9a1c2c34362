//go:build sitelab

package sitelab

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const metricsURL = "http://" + svcAddr + ":7470/metrics"

// TestPrivateDataAsBob (issue 44 item 4): the lab runs with Slurm's
// PrivateData=jobs. While alice's job runs, bob on the login host lists
// none of her jobs, is refused her job's status, cannot read the viewer's
// password, and gets no isched_job_ series from the coordinator's
// /metrics; alice still sees her own status, and svc (job_metrics_from)
// still gets her series.
func TestPrivateDataAsBob(t *testing.T) {
	needLab(t)
	dir, _ := userDir(t, testUser)
	script := filepath.Join(dir, "steps.py")
	src, err := os.ReadFile("testdata/steps.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	const total = 200
	out := on(t, "login", testUser, "env", "-C", dir, "isched", "submit", "-p", "cpu", "-t", "5", "--mem", "500M",
		"--total-iters", strconv.Itoa(total), "--job-name", "site-lab-private",
		`--wrapper-arg=--iter-pattern=step (?P<step>\d+)/(?P<total>\d+)`,
		"--", "/usr/bin/python3", script, strconv.Itoa(total), "0.5", svcAddr)
	sm, lm := submittedRE.FindStringSubmatch(out), lineageRE.FindStringSubmatch(out)
	if sm == nil || lm == nil {
		t.Fatalf("isched submit said no job id or lineage:\n%s", out)
	}
	job, lineage := sm[1], lm[1]
	t.Cleanup(func() { _, _ = siteLab("exec", "login", "root", "--", "scancel", job) })
	waitFor(t, 90*time.Second, "alice's own status RUNNING with steps", func() (bool, string) {
		st, raw := status(t, testUser, job)
		return st.State == "RUNNING" && st.Step > 0 && st.Lineage == lineage, raw
	})
	// the coordinator exports her series (to svc, a listed scraper)
	svc := waitFor(t, time.Minute, "isched_job_ series of "+lineage+" from svc", func() (bool, string) {
		s, _ := siteLab("exec", "svc", "root", "--", "curl", "-sS", "--max-time", "5", metricsURL)
		return strings.Contains(s, `isched_job_progress_ratio{lineage="`+lineage+`"`), s
	})
	if !strings.Contains(svc, "isched_coordinator_reports_total") {
		t.Errorf("svc's /metrics lacks the aggregate metrics")
	}

	// bob: his list and her job's status
	list := on(t, "login", "bob", "isched", "status")
	t.Logf("isched status as bob:\n%s", list)
	if strings.Contains(list, job) || strings.Contains(list, lineage) {
		t.Errorf("bob's isched status lists alice's job %s (%s):\n%s", job, lineage, list)
	}
	if out, err := siteLab("exec", "login", "bob", "--", "isched", "status", job); err == nil || strings.Contains(out, lineage) {
		t.Errorf("bob's isched status %s (alice's): err %v\n%s", job, err, out)
	} else {
		t.Logf("isched status %s as bob, refused: %s", job, strings.TrimSpace(out))
	}
	if out, err := siteLab("exec", "login", "bob", "--", "isched", "status", lineage, "--json"); err == nil || strings.Contains(out, `"step"`) {
		t.Errorf("bob's isched status %s --json (alice's lineage): err %v\n%s", lineage, err, out)
	}
	if out, err := siteLab("exec", "login", "bob", "--", "squeue", "-h", "-j", job); strings.Contains(out, job) {
		t.Errorf("squeue shows bob alice's job (is PrivateData=jobs in the lab's slurm.conf?): %v\n%s", err, out)
	}
	// bob: the viewer's password
	viewer := filepath.Join(siteDir, "redis", "viewer.pass")
	if out, err := siteLab("exec", "login", "bob", "--", "cat", viewer); err == nil {
		t.Errorf("bob reads the viewer password %s:\n%s", viewer, out)
	}
	// bob: /metrics from the login host
	m := on(t, "login", "bob", "curl", "-sS", "--max-time", "5", metricsURL)
	if strings.Contains(m, "isched_job_") || strings.Contains(m, lineage) {
		t.Errorf("/metrics from login as bob has per-job series:\n%.2000s", m)
	}
	if !strings.Contains(m, "isched_coordinator_reports_total") {
		t.Errorf("/metrics from login lacks the aggregate metrics:\n%.500s", m)
	}
	// alice still sees hers
	if st, raw := status(t, testUser, job); st.Lineage != lineage || st.Step <= 0 {
		t.Errorf("alice's own status after bob's tries:\n%s", raw)
	}
}
