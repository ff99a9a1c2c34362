package procstat

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    procStat
		wantErr bool
	}{{
		name: "plain",
		in:   "4242 (python) R 4200 4242 4200 0 -1 4194304 100 0 0 0 250 50 3 4 20 0 8 0 123456 1000 10 18446744073709551615\n",
		want: procStat{state: 'R', ppid: 4200, cpuTicks: 300, startTime: 123456},
	}, {
		name: "comm with spaces and parentheses",
		in:   "7 (pt worker) (1)) S 6 7 6 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 99 0 0",
		want: procStat{state: 'S', ppid: 6, cpuTicks: 3, startTime: 99},
	}, {
		name:    "truncated",
		in:      "7 (x) S 6 7 6 0 -1 0 0 0 0 0 1 2",
		wantErr: true,
	}, {
		name:    "no comm",
		in:      "7 x S 6",
		wantErr: true,
	}, {
		name:    "garbage number",
		in:      "7 (x) S 6 7 6 0 -1 0 0 0 0 0 1x 2 0 0 20 0 1 0 99",
		wantErr: true,
	}, {
		name:    "empty: vanished",
		in:      "",
		wantErr: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := parseStat(nil); !vanished(err) {
		t.Errorf("empty stat: err = %v, want a vanished error", err)
	}
}

func TestParseStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    procStatus
		wantErr bool
	}{
		{"process", "Name:\tpython\nVmPeak:\t  3060 kB\nVmHWM:\t    1664 kB\nVmRSS:\t    1600 kB\nRssAnon:\t 116 kB\n", procStatus{rss: 1600 << 10, hwm: 1664 << 10}, false},
		{"zombie", "Name:\tpython\nState:\tZ (zombie)\nThreads:\t1\n", procStatus{}, false},
		{"bad", "VmRSS:\tx kB\n", procStatus{}, true},
		{"no newline at end", "VmRSS:\t1 kB", procStatus{rss: 1024}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseStatus([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("got %+v, %v; want %+v, err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParsePSS(t *testing.T) {
	t.Parallel()
	in := "557d32373000-7ffcea68c000 ---p 00000000 00:00 0                          [rollup]\nRss:                1616 kB\nPss:                 415 kB\nPss_Dirty:           116 kB\n"
	if got, err := parsePSS([]byte(in)); err != nil || got != 415<<10 {
		t.Errorf("got %d, %v; want %d", got, err, 415<<10)
	}
	if _, err := parsePSS([]byte("Rss: 1 kB\nPss_Dirty: 2 kB\n")); err == nil {
		t.Error("no error without a Pss line")
	}
}

func TestParseSmall(t *testing.T) {
	t.Parallel()
	if got, err := parseUptime([]byte("12345.67 54321.00\n")); err != nil || got != 1234567 {
		t.Errorf("parseUptime = %d, %v; want 1234567", got, err)
	}
	if _, err := parseUptime([]byte("x 1\n")); err == nil {
		t.Error("parseUptime: no error for garbage")
	}
	if got, err := parsePIDList(nil, []byte("12 13 14 ")); err != nil || !slices.Equal(got, []int32{12, 13, 14}) {
		t.Errorf("parsePIDList = %v, %v", got, err)
	}
	if got, err := parsePIDList(nil, []byte("")); err != nil || len(got) != 0 {
		t.Errorf("parsePIDList(empty) = %v, %v", got, err)
	}
	if _, err := parsePIDList(nil, []byte("12 0 ")); err == nil {
		t.Error("parsePIDList: no error for pid 0")
	}
	for in, want := range map[string]bool{"18446744073709551615": true, "18446744073709551616": false, "99999999999999999999": false, "": false, "-1": false} {
		if _, err := parseUint([]byte(in)); (err == nil) != want {
			t.Errorf("parseUint(%q): err = %v, want ok=%v", in, err, want)
		}
	}
}

func TestParseProcCgroup(t *testing.T) {
	t.Parallel()
	v1, v2, ok1, ok2 := parseProcCgroup([]byte("12:memory:/slurm/uid_1/job_2/step_0/task_0\n5:cpu,cpuacct:/x\n0::/user.slice\n"))
	if !ok1 || !ok2 || v1 != "/slurm/uid_1/job_2/step_0/task_0" || v2 != "/user.slice" {
		t.Errorf("got %q %q %v %v", v1, v2, ok1, ok2)
	}
	_, _, ok1, ok2 = parseProcCgroup([]byte("1:name=systemd:/\n"))
	if ok1 || ok2 {
		t.Errorf("named hierarchy taken for memory")
	}
}

func TestParseMountinfo(t *testing.T) {
	t.Parallel()
	in := "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n" +
		"36 31 0:33 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n" +
		"41 31 0:38 /x /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n" +
		"42 31 0:39 / /proc rw - proc proc rw\n" +
		"garbage\n"
	want := []cgroupMount{
		{v2: false, root: "/", mountPoint: "/sys/fs/cgroup/memory"},
		{v2: true, root: "/x", mountPoint: "/mnt/my cg"},
	}
	if got := parseMountinfo([]byte(in)); !slices.Equal(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestReaderGrowsAndVanishes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := strings.Repeat("x", 10000)
	path := filepath.Join(dir, "big")
	if err := os.WriteFile(path, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	var r reader
	if b, err := r.read(path); err != nil || string(b) != big {
		t.Errorf("read of 10000 bytes: %d bytes, %v", len(b), err)
	}
	_, err := r.read(filepath.Join(dir, "gone"))
	if !vanished(err) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want a vanished error", err)
	}
	if _, err := r.read(dir); err == nil || vanished(err) {
		t.Errorf("reading a directory: err = %v, want a non-vanished error", err)
	}
}
