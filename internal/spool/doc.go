// Package spool is the wrapper's report queue and its on-disk side: a
// bounded, ordered queue of signed reports (Queue) that mirrors itself to a
// locked spool file while Redis is unreachable, and the replay of the spool
// files that ended wrappers left behind (leftovers).
//
// A Queue keeps reports in memory, dropping the oldest samples (never
// events, never a record in flight) past its bounds. From the first failed
// send on (StartSpooling) it writes every queued record to its spool file
// as a JSON line, and removes the file once the queue is empty; at exit
// (Finish) the file holds exactly the records still queued. A spool write
// error (disk full) is logged once and the queue goes on in memory:
// monitoring never harms training.
//
// A live wrapper holds an exclusive flock on its spool file, so a leftover
// is a file nobody holds. The next wrapper of the same user on the node (a
// requeued attempt, the user's next job) or `isched-wrapper --send-spools`
// finds such files (Layout, FindLeftovers) and sends their records in order
// (Replay), taking the lock before it reads. The records are signed with
// their own session's key, so a replay can neither forge nor move anything:
// the coordinator checks each against its session and refuses a sequence
// number it has seen.
//
// The package sends through a Sink the caller provides; it knows nothing
// of Redis or of the wrapper.
package spool
