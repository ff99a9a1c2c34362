package wrapper

import (
	"strings"
	"testing"
)

func TestChooseReportPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want ReportPath
		why  string // a word the reason must hold; "" for none
	}{
		{"nothing configured reports nothing, loudly", nil, nil, ReportNone, "opt-in"},
		{"relay from the environment", nil, map[string]string{"ISCHED_RELAY_ADDR": "relay:6395"}, ReportRelay, ""},
		{"relay flag", []string{"--relay", "relay:6395"}, nil, ReportRelay, ""},
		{"direct is an explicit flag", []string{"--report-direct"}, nil, ReportDirect, ""},
		{"direct from the environment", nil, map[string]string{"ISCHED_REPORT_DIRECT": "1"}, ReportDirect, ""},
		{"direct spelled true", nil, map[string]string{"ISCHED_REPORT_DIRECT": "TRUE"}, ReportDirect, ""},
		{"direct turned off", nil, map[string]string{"ISCHED_REPORT_DIRECT": "0"}, ReportNone, "opt-in"},
		{"a password file alone is not an opt-in", nil, map[string]string{"ISCHED_REDIS_PASSWORD_FILE": "/etc/reporter.pass"}, ReportNone, "opt-in"},
		{"relay wins over direct", []string{"--report-direct", "--relay", "r:1"}, nil, ReportRelay, "both"},
		{"no-report wins", []string{"--no-report", "--relay", "r:1"}, nil, ReportNone, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			o, err := ParseArgs(append(tc.args, "--", "true"), getenv, &strings.Builder{})
			if err != nil {
				t.Fatal(err)
			}
			p, why := ChooseReportPath(o)
			if p != tc.want {
				t.Errorf("path %s, want %s", p, tc.want)
			}
			if (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Errorf("why %q, want one holding %q", why, tc.why)
			}
		})
	}
}

func TestReportDirectEnvSpelling(t *testing.T) {
	getenv := func(k string) string {
		if k == "ISCHED_REPORT_DIRECT" {
			return "maybe"
		}
		return ""
	}
	_, err := ParseArgs([]string{"--", "true"}, getenv, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "ISCHED_REPORT_DIRECT") {
		t.Fatalf("err %v, want one naming ISCHED_REPORT_DIRECT", err)
	}
}
