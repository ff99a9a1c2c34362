// Package sitelab holds the site lab's test (build tag sitelab): isched on
// four hosts, each a network namespace with its own address, that
// scripts/site-lab up starts (a service host with slurmctld, Redis,
// isched-relay, isched-agent and isched-coordinator; compute hosts c1 and
// c2 with one slurmd each; a login host for the user's CLI). A user
// submits from the login host; the test checks that the job runs on a
// compute host, that its reports reach Redis through the relay at the
// service host's address, and that `isched status` on the login host
// follows it. It fails, never skips, when the site lab is not up.
//
// Run it with `make site-lab-test` (as root: it starts the lab first);
// `make test` runs that as its last stage and takes the lab down after.
package sitelab
