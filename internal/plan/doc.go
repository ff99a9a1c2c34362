// Package plan answers the user's questions before a job is submitted: how
// much memory will it need, how long will it run and what will it cost on
// each kind of node (Estimate), how long will it wait on each partition
// (EstimateWait), and is it better to wait for the fastest partition or to
// start now on what is idle and move later (MakePlans, Choose).
//
// Inputs are a model summary (Model, model.json from
// scripts/model_summary.py), a site catalogue (Site: node types, costs,
// partitions), the cluster state (report.Snapshot and report.JobTable from
// the agent, the coordinator's predicted ends) and receipts of finished
// runs (report.Receipt). Every row says where its numbers come from:
// measured, scaled or static. docs/model-summary.md documents the file
// formats and the models' assumptions.
//
// The package is pure: it imports the standard library and internal/report
// only, does no I/O and reads no clock (callers pass now).
package plan
