// Package estimate learns from one job's own reports while it runs
// (intra-job predictability): its iteration time with an uncertainty band,
// the predicted end, its memory trend and predicted peak, how long its
// checkpoints take, and health events (stall, NaN loss, memory) for the user.
//
// Every estimator is a plain struct with exported, JSON-tagged fields so the
// coordinator can persist it in Redis after each report and resume after a
// restart; memory is bounded whatever the length of the run. Nothing here
// reads a clock: times are passed in, so the package is deterministic and
// tests without sleeping.
//
// Static or scaled estimates from other jobs (receipts, the CLI's planner)
// live elsewhere (internal/plan); this package only looks at one job.
//
// The package imports only the standard library and internal/report.
package estimate
