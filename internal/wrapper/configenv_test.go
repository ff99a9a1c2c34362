package wrapper

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigEnv: a wrapper with no ISCHED_RELAY_ADDR in its environment
// takes the relay, the coordinator's uid and the cluster from the site's
// isched.conf (ISCHED_CONF here), so a user's own batch script reports
// through the relay; the environment wins over the file; the CLI's Redis
// settings (the viewer's) are never taken; a bad file leaves the
// environment as it is, with an error to log.
func TestConfigEnv(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join(dir, "site.conf")
	conf := "cluster = frontera\nrelay_addr = relay.site:6395\ncoordinator_uid = 998\nredis_user = viewer\nredis_password_file = /etc/isched/viewer.pass\n"
	if err := os.WriteFile(site, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("clustr = x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want map[string]string
		err  string
	}{
		{"the site's relay for a hand-written script", map[string]string{"ISCHED_CONF": site},
			map[string]string{"ISCHED_RELAY_ADDR": "relay.site:6395", "ISCHED_COORDINATOR_UID": "998", "ISCHED_CLUSTER": "frontera",
				"ISCHED_REDIS_USER": "", "ISCHED_REDIS_PASSWORD_FILE": ""}, ""},
		{"the environment wins", map[string]string{"ISCHED_CONF": site, "ISCHED_RELAY_ADDR": "mine:1", "ISCHED_CLUSTER": "lab"},
			map[string]string{"ISCHED_RELAY_ADDR": "mine:1", "ISCHED_CLUSTER": "lab"}, ""},
		{"the environment's opt-in to direct beats the file's relay", map[string]string{"ISCHED_CONF": site, "ISCHED_REPORT_DIRECT": "1"},
			map[string]string{"ISCHED_RELAY_ADDR": "", "ISCHED_CLUSTER": "frontera"}, ""},
		{"a bad file: the environment alone", map[string]string{"ISCHED_CONF": bad, "ISCHED_CLUSTER": "lab"},
			map[string]string{"ISCHED_RELAY_ADDR": "", "ISCHED_CLUSTER": "lab"}, "clustr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv, err := ConfigEnv(func(k string) string { return tc.env[k] })
			if (err != nil) != (tc.err != "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want one naming %q", err, tc.err)
			}
			for k, v := range tc.want {
				if got := getenv(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			o, err := ParseArgs([]string{"--", "true"}, getenv, &strings.Builder{})
			if err != nil {
				t.Fatal(err)
			}
			if p, _ := ChooseReportPath(o); (p == ReportRelay) != (tc.want["ISCHED_RELAY_ADDR"] != "") || tc.env["ISCHED_REPORT_DIRECT"] == "1" && p != ReportDirect {
				t.Errorf("report path %s with relay %q", p, tc.want["ISCHED_RELAY_ADDR"])
			}
		})
	}
}
