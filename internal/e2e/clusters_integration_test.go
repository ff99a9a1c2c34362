//go:build integration

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// TestSubmitToSecondCluster (issue 27, item 3): the lab has two Slurm
// clusters in one slurmdbd, lab (home) and lab2, each with its own isched
// agent, coordinator and relay. lab's gpu partition is full; alice, on
// lab's login host with lab2 in her clusters setting, plans (lab2's
// partitions appear as PARTITION@lab2, with waits from lab2's agent),
// submits (the job goes to lab2 with sbatch --clusters, reports through
// lab2's relay) and follows the run to its end with isched status.
func TestSubmitToSecondCluster(t *testing.T) {
	home := newWorld(t, fastPolicy)
	lab2 := newWorldOnCluster(t, fastPolicy, "lab2")
	relay2 := lab2.startRelay()
	cli := testutil.Binary(t, "isched", "./isched")
	root := testutil.RepoRoot()
	blocker := home.blockGPU(t, 3*time.Minute)
	defer exec.Command("scancel", blocker).Run()
	// the plan reads the agents' snapshots: lab's must show its gpu full
	// (ci53: one taken just before the blocker ran showed it idle, and the
	// job went to lab's gpu), lab2's must be there
	waitFor(t, home, time.Minute, "lab's agent to see its gpu partition full", func() bool {
		p, ok := home.snapshotPartition("gpu")
		return ok && gpuIdleOf(p) == 0
	})
	waitFor(t, lab2, time.Minute, "lab2's agent to see its gpu partition idle", func() bool {
		p, ok := lab2.snapshotPartition("gpu")
		return ok && gpuIdleOf(p) > 0
	})

	base := testutil.WorkDir(t, "isched-clusters-")
	homeDir, uid := userDir(t, base, "alice")
	// lab2's isched.conf, as lab2's own login nodes would have it
	lab2Conf := filepath.Join(base, "lab2.conf")
	writeAs(t, lab2Conf, []byte("cluster = lab2\nsite = "+filepath.Join(root, "examples/site-lab2.json")+"\nrelay_addr = "+relay2+"\n"), 0o644, 0)
	conf := "cluster = " + home.cluster + "\nredis_addr = " + home.redis.Addr + "\nredis_user = viewer\nredis_password_file = " +
		home.redis.PasswordFile("viewer") + "\nsite = " + filepath.Join(root, "examples/site-lab.json") +
		"\nhelper_dir = " + filepath.Join(root, "scripts") + "\nclusters = lab2=" + lab2Conf + "\n"
	writeUserConf(t, homeDir, uid, conf)
	run := aliceCLI(t, homeDir, cli)
	est := []string{"--model", filepath.Join(root, "internal/cli/testdata/mnist_cnn.json"), "--samples", "3200", "--epochs", "1", "--batch", "16",
		"--optimizer", "momentum", "--receipts", "none"}
	out := run(append([]string{"plan"}, est...)...)
	t.Logf("isched plan:\n%s", out)
	if !regexpLine(out, `^gpu@lab2\s+lab-gpu\s+0\s`) || !strings.Contains(out, "lab2: agent snapshot in Redis") {
		t.Errorf("the plan does not show lab2's idle gpu partition from lab2's agent")
	}

	const total = 40
	out = run(append(append([]string{"submit"}, est...), "--total-iters", strconv.Itoa(total), "--wrapper", filepath.Join(binDir, "isched-wrapper"),
		"--", "/usr/bin/python3", filepath.Join(root, "internal/wrapper/testdata/fake_trainer.py"), "--steps", strconv.Itoa(total), "--period", "0.1")...)
	t.Logf("isched submit:\n%s", out)
	m := lineageRE.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, " on cluster lab2") || !strings.HasPrefix(m[1], "lab2-u"+strconv.Itoa(uid)+"-") {
		t.Fatalf("isched submit did not send the job to lab2 in lab2's namespace:\n%s", out)
	}
	lineage := m[1]
	job := strings.Fields(out[strings.Index(out, "Submitted batch job ")+len("Submitted batch job "):])[0]
	lab2.jobs = append(lab2.jobs, job)

	var st report.JobStatus
	waitFor(t, lab2, 3*time.Minute, "the run on lab2 to end", func() bool {
		st, _ = lab2.status(lineage)
		return st.State == "ENDED"
	})
	if st.Step != total || st.Partition != "gpu" || st.Node != "l2gpu1" {
		t.Errorf("ended at step %d on %s/%s, want %d on gpu/l2gpu1", st.Step, st.Partition, st.Node, total)
	}
	acct, err := exec.Command("sacct", "--clusters=lab2", "-j", job, "-X", "-n", "-P", "-o", "Cluster,Partition,NodeList,User").Output()
	if err != nil || strings.TrimSpace(string(acct)) != "lab2|gpu|l2gpu1|alice" {
		t.Errorf("sacct --clusters=lab2 -j %s: %q %v", job, acct, err)
	}
	// by lineage, as submit said: lab2's job ids may name old jobs of lab
	// in lab's accounting
	out = run("status", lineage)
	t.Logf("isched status %s:\n%s", lineage, out)
	if !strings.Contains(out, "ENDED") || !strings.Contains(out, strconv.Itoa(total)+"/"+strconv.Itoa(total)) {
		t.Errorf("isched status %s on lab's login host does not follow the run on lab2", lineage)
	}
	relayLog, _ := os.ReadFile(filepath.Join(lab2.dir, "relay.log"))
	if !strings.Contains(string(relayLog), "uid="+strconv.Itoa(uid)) {
		t.Errorf("the job did not report through lab2's relay:\n%s", relayLog)
	}
}

// regexpLine reports whether a line of out matches pattern.
func regexpLine(out, pattern string) bool {
	return regexp.MustCompile(`(?m)` + pattern).MatchString(out)
}

// snapshotPartition is a partition of the agent's latest snapshot.
func (w *world) snapshotPartition(name string) (report.Partition, bool) {
	snap, ok := w.snapshot()
	if !ok {
		return report.Partition{}, false
	}
	for _, p := range snap.Partitions {
		if p.Name == name {
			return p, true
		}
	}
	return report.Partition{}, false
}

func gpuIdleOf(p report.Partition) int {
	n := 0
	for _, g := range p.GPUs {
		n += g.Idle
	}
	return n
}
