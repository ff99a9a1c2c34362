package procstat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMemCgroupOutlivesProcess: the cgroup is resolved while the process
// lives and read after /proc/<pid> is gone, as the wrapper does with a child
// the OOM killer ended; the OOM-kill counter is read from memory.events (v2)
// or memory.oom_control (v1).
func TestMemCgroupOutlivesProcess(t *testing.T) {
	t.Parallel()
	const (
		v2Mounts = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
		v1Mounts = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
		v2Task   = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_5/step_0/user/task_0"
		v1Task   = "/sys/fs/cgroup/memory/slurm_cpu1/uid_0/job_367/step_0/task_0"
	)
	tests := []struct {
		name      string
		procCg    string
		mountinfo string
		before    map[string]string // while the process lives
		after     map[string]string // after it was killed
		want0     CgroupMemory
		want      CgroupMemory
	}{{
		name:      "v2 oom kill",
		procCg:    "0::/system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n",
		mountinfo: v2Mounts,
		before: map[string]string{
			v2Task + "/memory.peak":   "1000\n",
			v2Task + "/memory.max":    "max\n",
			v2Task + "/memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
			"/sys/fs/cgroup/system.slice/slurmstepd.scope/job_5/step_0/memory.max": "314572800\n",
		},
		after: map[string]string{
			v2Task + "/memory.peak":   "314572800\n",
			v2Task + "/memory.events": "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n",
		},
		want0: CgroupMemory{Path: "/system.slice/slurmstepd.scope/job_5/step_0/user/task_0", PeakBytes: 1000, LimitBytes: 314572800, OOMKillsKnown: true},
		want:  CgroupMemory{Path: "/system.slice/slurmstepd.scope/job_5/step_0/user/task_0", PeakBytes: 314572800, LimitBytes: 314572800, OOMKills: 1, OOMKillsKnown: true},
	}, {
		name:      "v1 oom kill",
		procCg:    "4:memory:/slurm_cpu1/uid_0/job_367/step_0/task_0\n0::/\n",
		mountinfo: v1Mounts,
		before: map[string]string{
			v1Task + "/memory.max_usage_in_bytes":                                         "2000\n",
			v1Task + "/memory.limit_in_bytes":                                             "9223372036854771712\n",
			v1Task + "/memory.oom_control":                                                "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
			"/sys/fs/cgroup/memory/slurm_cpu1/uid_0/job_367/step_0/memory.limit_in_bytes": "314572800\n",
		},
		after: map[string]string{
			v1Task + "/memory.max_usage_in_bytes": "314568704\n",
			v1Task + "/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n",
		},
		want0: CgroupMemory{Path: "/slurm_cpu1/uid_0/job_367/step_0/task_0", PeakBytes: 2000, LimitBytes: 314572800, OOMKills: 3, OOMKillsKnown: true},
		want:  CgroupMemory{Path: "/slurm_cpu1/uid_0/job_367/step_0/task_0", PeakBytes: 314568704, LimitBytes: 314572800, OOMKills: 4, OOMKillsKnown: true},
	}, {
		name:      "v1 kernel before 4.13: no counter",
		procCg:    "4:memory:/a\n",
		mountinfo: v1Mounts,
		before: map[string]string{
			"/sys/fs/cgroup/memory/a/memory.max_usage_in_bytes": "5\n",
			"/sys/fs/cgroup/memory/a/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\n",
		},
		want0: CgroupMemory{Path: "/a", PeakBytes: 5},
		want:  CgroupMemory{Path: "/a", PeakBytes: 5},
	}, {
		name:      "v2 files missing (cgroup gone, old kernel)",
		procCg:    "0::/b\n",
		mountinfo: v2Mounts,
		want0:     CgroupMemory{Path: "/b"},
		want:      CgroupMemory{Path: "/b"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			writeFile(t, filepath.Join(root, "proc/100/cgroup"), tt.procCg)
			writeFile(t, filepath.Join(root, "proc/self/mountinfo"), tt.mountinfo)
			for name, content := range tt.before {
				writeFile(t, filepath.Join(root, name), content)
			}
			cg, err := OpenMemCgroup(filepath.Join(root, "proc"), filepath.Join(root, "sys"), 100)
			if err != nil || cg == nil {
				t.Fatalf("OpenMemCgroup = %v, %v", cg, err)
			}
			got, err := cg.Read()
			if err != nil || got != tt.want0 {
				t.Errorf("while alive: %+v, %v; want %+v", got, err, tt.want0)
			}
			if err := os.RemoveAll(filepath.Join(root, "proc/100")); err != nil {
				t.Fatal(err)
			}
			for name, content := range tt.after {
				writeFile(t, filepath.Join(root, name), content)
			}
			got, err = cg.Read()
			if err != nil || got != tt.want {
				t.Errorf("after the process: %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestMemCgroupNone(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	proc, sys := filepath.Join(root, "proc"), filepath.Join(root, "sys")
	if cg, err := OpenMemCgroup(proc, sys, 100); cg != nil || err != nil {
		t.Errorf("vanished process: %v, %v; want nil, nil", cg, err)
	}
	writeFile(t, filepath.Join(proc, "100/cgroup"), "1:cpu:/x\n")
	writeFile(t, filepath.Join(proc, "self/mountinfo"), "35 31 0:32 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")
	if cg, err := OpenMemCgroup(proc, sys, 100); cg != nil || err != nil {
		t.Errorf("no memory controller: %v, %v; want nil, nil", cg, err)
	}
}

func TestMemCgroupBadCounter(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "proc/100/cgroup"), "0::/a\n")
	writeFile(t, filepath.Join(root, "proc/self/mountinfo"), "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/a/memory.peak"), "12\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/a/memory.events"), "oom 1\noom_kill -1\n")
	cg, err := OpenMemCgroup(filepath.Join(root, "proc"), filepath.Join(root, "sys"), 100)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cg.Read()
	if err == nil || !strings.Contains(err.Error(), "oom_kill") {
		t.Errorf("error %v, want one about oom_kill", err)
	}
	if got.PeakBytes != 12 || got.OOMKillsKnown {
		t.Errorf("got %+v, want the peak and no counter", got)
	}
}
