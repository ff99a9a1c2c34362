package child

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseSignalMap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want map[os.Signal]Delivery
		// errHas are substrings the error must contain (the bad part).
		errHas []string
	}{
		{in: "", want: map[os.Signal]Delivery{}},
		{in: "USR1=TERM", want: map[os.Signal]Delivery{syscall.SIGUSR1: {Signal: syscall.SIGTERM}}},
		{
			in: "USR1=TERM,USR2=file:/scratch/run1/ckpt-request",
			want: map[os.Signal]Delivery{
				syscall.SIGUSR1: {Signal: syscall.SIGTERM},
				syscall.SIGUSR2: {File: "/scratch/run1/ckpt-request"},
			},
		},
		{
			in:   " sigusr1 = sigint , Hup=usr2 ",
			want: map[os.Signal]Delivery{syscall.SIGUSR1: {Signal: syscall.SIGINT}, syscall.SIGHUP: {Signal: syscall.SIGUSR2}},
		},
		{in: "USR1", errHas: []string{`entry 1 "USR1"`, "FROM=TO"}},
		{in: "USR1=TERM,USR3=TERM", errHas: []string{`entry 2 "USR3=TERM"`, `unknown signal "USR3"`}},
		{in: "USR1=BOGUS", errHas: []string{`unknown signal "BOGUS"`}},
		{in: "=TERM", errHas: []string{"empty signal name"}},
		{in: "USR1=", errHas: []string{"empty signal name"}},
		{in: "KILL=TERM", errHas: []string{"KILL is not a forwarded signal", "TERM, INT, USR1, USR2, HUP"}},
		{in: "CHLD=TERM", errHas: []string{"CHLD is not a forwarded signal"}},
		{in: "USR1=TERM,SIGUSR1=INT", errHas: []string{`entry 2`, "USR1 is mapped twice"}},
		{in: "USR1=TERM,", errHas: []string{"entry 2", "empty entry"}},
		{in: "USR2=file:", errHas: []string{"empty control file path"}},
		{in: "USR2=file:ckpt-request", errHas: []string{`"ckpt-request" is not an absolute path`}},
	}
	for _, tt := range tests {
		got, err := ParseSignalMap(tt.in)
		if tt.errHas != nil {
			if err == nil {
				t.Errorf("ParseSignalMap(%q) = %v, want an error", tt.in, got)
				continue
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("ParseSignalMap(%q) error %q does not mention %q", tt.in, err, s)
				}
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseSignalMap(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestDeliveryString(t *testing.T) {
	t.Parallel()
	for d, want := range map[Delivery]string{
		{}:                        "same",
		{Signal: syscall.SIGTERM}: "TERM",
		{File: "/x/ckpt"}:         "file:/x/ckpt",
	} {
		if got := d.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", d, got, want)
		}
	}
}

func TestWriteControlFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt-request")
	// Replacing an existing request works too (the helper may not have
	// consumed the previous one yet).
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		if err := writeControlFile(path, sig, time.Unix(1732200000, 0)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "SIGUSR2 1732200000\n" {
		t.Errorf("content %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the control file", len(entries))
	}
	if err := writeControlFile(filepath.Join(dir, "missing", "ckpt"), syscall.SIGUSR1, time.Now()); err == nil {
		t.Errorf("writing into a missing directory succeeded")
	}
}

// BenchmarkStartWait measures the start-to-exit time of /bin/true, and
// separately the start delay: from Start's call until it returns with the
// child exec'd.
func BenchmarkStartWait(b *testing.B) {
	path, err := exec.LookPath("true")
	if err != nil {
		b.Skip(err)
	}
	cfg := Config{Argv: []string{path}}
	ctx := context.Background()
	var startDelay time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		p, err := Start(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		startDelay += time.Since(t0)
		if e, err := p.Wait(); err != nil || e.Status() != 0 {
			b.Fatal(e, err)
		}
	}
	b.ReportMetric(float64(startDelay.Microseconds())/float64(b.N), "start-µs/op")
}
