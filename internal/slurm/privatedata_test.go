package slurm

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParsePrivateData(t *testing.T) {
	t.Parallel()
	conf, err := os.ReadFile(filepath.Join("testdata", "22.05", "show_config.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := ParsePrivateData(conf); len(got) != 0 {
		t.Errorf("22.05 capture (PrivateData = none): %q", got)
	}
	for in, want := range map[string][]string{
		"ClusterName = lab\nPrivateData             = accounts,jobs\n": {"accounts", "jobs"},
		"PrivateData = Jobs, usage\n":                                  {"jobs", "usage"},
		"ClusterName = lab\n":                                          nil,
	} {
		if got := ParsePrivateData([]byte(in)); !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
