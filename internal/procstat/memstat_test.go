package procstat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseMemoryStat: page cache and anonymous memory apart, on a v1
// memory.stat captured in a Slurm job of the dev cluster that held ~68 MiB
// of anonymous memory and had written a 200 MiB file (task/cgroup v1,
// --mem=1G), and on a v2 one in the layout of Linux 6.x for a job with
// 643 MiB of anonymous memory and 384 MiB of checkpoint cache.
func TestParseMemoryStat(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		name    string
		file    string // under testdata, or "" for content
		content string
		v2      bool
		want    CgroupMemStat
		unrecl  int64
		wantErr string
	}{{
		name: "v1 slurm job after a checkpoint", file: "memory.stat.v1-slurm-checkpoint",
		want:   CgroupMemStat{Known: true, AnonBytes: 71024640, FileBytes: 200 * mib},
		unrecl: 71024640,
	}, {
		name: "v2 checkpointing job", file: "memory.stat.v2-checkpoint", v2: true,
		want: CgroupMemStat{Known: true, AnonBytes: 674660352, FileBytes: 384 * mib, ShmemBytes: 4 * mib,
			KernelBytes: 1802240 + 294912 + 2097152},
		unrecl: 674660352 + 4*mib + 1802240 + 294912 + 2097152,
	}, {
		name: "v1 without hierarchy totals uses the cgroup's own", content: "cache 10\nrss 20\nshmem 3\n",
		want: CgroupMemStat{Known: true, AnonBytes: 20, FileBytes: 10, ShmemBytes: 3}, unrecl: 23,
	}, {
		name: "v1 totals win over own", content: "cache 10\nrss 20\ntotal_cache 100\ntotal_rss 200\n",
		want: CgroupMemStat{Known: true, AnonBytes: 200, FileBytes: 100}, unrecl: 200,
	}, {
		name: "bad value", content: "anon 12x\nfile 3\n", v2: true, wantErr: `anon: bad value "12x"`,
	}, {
		name: "negative value", content: "total_rss -1\n", wantErr: "total_rss: bad value",
	}, {
		name: "nothing known", content: "pgfault 3\n", v2: true, wantErr: "none of",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := []byte(tt.content)
			if tt.file != "" {
				var err error
				if b, err = os.ReadFile(filepath.Join("testdata", tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ParseMemoryStat(b, tt.v2)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if u := got.UnreclaimableBytes(); u != tt.unrecl {
				t.Errorf("unreclaimable %d, want %d", u, tt.unrecl)
			}
		})
	}
}

// TestCgroupReadsMemoryStat: a sample of a process in a v2 cgroup carries
// the split of its cgroup's charge.
func TestCgroupReadsMemoryStat(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "proc/100/cgroup"), "0::/job\n")
	writeFile(t, filepath.Join(root, "proc/self/mountinfo"), "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/job/memory.peak"), "1069547520\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/job/memory.max"), "1073741824\n")
	b, err := os.ReadFile("testdata/memory.stat.v2-checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/job/memory.stat"), string(b))
	c := cgroupResolver{procRoot: filepath.Join(root, "proc"), sysRoot: filepath.Join(root, "sys")}
	var r reader
	got, err := c.stat(&r, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !got.mem.Known || got.mem.AnonBytes != 674660352 || got.mem.FileBytes != 384<<20 {
		t.Errorf("memory.stat not read: %+v", got.mem)
	}
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/job/memory.stat"), "anon lots\n")
	if _, err := c.stat(&r, 100); err == nil || !strings.Contains(err.Error(), "memory.stat") {
		t.Errorf("a bad memory.stat gave err %v, want one naming memory.stat", err)
	}
}
