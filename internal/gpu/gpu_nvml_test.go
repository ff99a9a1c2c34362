//go:build gpu

package gpu

import (
	"log/slog"
	"os"
	"testing"
)

// TestSystemNVML needs a machine with an NVIDIA driver: go test -tags gpu.
func TestSystemNVML(t *testing.T) {
	c := NewSystem(slog.Default())
	defer c.Close()
	st := c.Collect([]int32{int32(os.Getpid())})
	if st.NoData != "" {
		t.Fatalf("NoData = %q", st.NoData)
	}
	if len(st.Devices) == 0 {
		t.Fatal("no devices")
	}
	for _, d := range st.Devices {
		if d.UUID == "" || d.TotalBytes <= 0 {
			t.Errorf("device %+v: no UUID or memory", d)
		}
		t.Logf("%+v", d)
	}
}
