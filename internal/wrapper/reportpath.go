package wrapper

// ReportPath is how a wrapper's reports leave the job.
type ReportPath int

const (
	// ReportNone: nothing is sent (--no-report, or nothing configured).
	ReportNone ReportPath = iota
	// ReportRelay: through isched-relay; the job holds no Redis password.
	ReportRelay
	// ReportDirect: straight to Redis as the reporter user, whose
	// password the job must read (the explicit opt-in).
	ReportDirect
)

func (p ReportPath) String() string {
	switch p {
	case ReportRelay:
		return "relay"
	case ReportDirect:
		return "direct"
	}
	return "none"
}

// ChooseReportPath decides how reports leave the job. The relay is the
// default path and the only one that needs no secret in the job; Redis
// straight is taken only when asked for (--report-direct), so a site that
// forgot to configure the relay gets a loud "not reported", never jobs
// that read a password every user can read (issue 26, item 1). why, when
// not empty, is what to tell the user.
func ChooseReportPath(o Options) (p ReportPath, why string) {
	switch {
	case o.NoReport:
		return ReportNone, ""
	case o.Relay != "" && o.ReportDirect:
		return ReportRelay, "both --relay and --report-direct given: reporting through isched-relay"
	case o.Relay != "":
		return ReportRelay, ""
	case o.ReportDirect:
		return ReportDirect, ""
	}
	return ReportNone, "not reported: no isched-relay given (--relay, ISCHED_RELAY_ADDR, or relay_addr in the site's isched.conf: ISCHED_CONF or /etc/isched/isched.conf), " +
		"and reporting straight to Redis is opt-in (--report-direct or ISCHED_REPORT_DIRECT=1); isched will neither follow nor continue this run"
}
