package main

// programs are the man pages' fixed text; the flags come from the
// binaries.
func programs() []Program {
	redis := [][2]string{
		{"ISCHED_REDIS_ADDR", "Redis address host:port (a comma-separated list for Sentinel or Cluster)"},
		{"ISCHED_REDIS_USER", "Redis ACL user"},
		{"ISCHED_REDIS_PASSWORD_FILE", "file holding the user's password (first line)"},
		{"ISCHED_REDIS_CA", "CA certificate: speak TLS to Redis and verify the server against it"},
		{"ISCHED_REDIS_MASTER", "Sentinel master name (the addresses are Sentinels)"},
		{"ISCHED_CLUSTER", "cluster name in every Redis key"},
	}
	return []Program{
		{
			Name: "isched", Section: "1", Summary: "estimate, plan, submit and follow DNN training jobs on Slurm",
			Description: `isched is the user's command of isched, which makes DNN training on Slurm cheaper: it estimates a model's memory and run time per batch size and node type, plans where to run it, writes and submits the batch script (the training command runs under isched-wrapper), and shows a job's progress, ETA, memory, checkpoints and the coordinator's decisions.

isched submit takes the site's sbatch options (--account, --qos, --mail-type, --mail-user, --constraint, --ntasks, --nodes and a repeatable --sbatch-arg=--name[=value]) and keeps the user's SBATCH_* environment, except the variables that would override a line isched writes; see /usr/share/doc/isched/deployment.md. Run python3 /usr/share/isched/model_summary.py to describe a model (model.json). isched version prints the version.

isched help CMD, isched CMD -h and isched CMD --help print a command's usage and flags on standard output. A mistyped command or flag is answered with the closest known names ("did you mean"), before one short usage line. Options are GNU's, as sbatch's: --name value, --name=value, and sbatch's one-letter spellings (-p gpu, -pgpu, -t 2:00:00, -c 8, -N 1, -n 4, -G 1, -J name, -A account, -q qos, -o file, -e file, -C features, -a 0-3). isched completion bash|zsh|fish prints the shell completion script, which completes commands, flags, partitions, QOS and your own job ids and lineages. --json (estimate, plan, status, report, simulate, config) prints JSON alone on standard output, in one style: snake_case keys, times in RFC 3339 (UTC, milliseconds; null when unknown), durations in seconds (keys ending in _s), sizes in bytes (keys ending in _bytes); docs/json.md describes each command's output. Exit status: 0 on success and for help, 1 when the command failed (a job id that neither Slurm nor isched's records know included), 2 on a usage error (unknown command or flag, missing argument).

isched profile runs the real training command under isched-wrapper for a short measured window per batch size ({batch} in an argument, or ISCHED_BATCH), here (--local) or as short Slurm jobs (--partition), and keeps what it measured as the user's own receipts, which estimate, plan and submit then use (source "profiled").

isched site probe (site administrators, once per node type, on a node of that type: srun -p P isched site probe --local --node-type T) measures the framework's memory footprint and the training throughput of convolutions, depthwise convolutions, matrix products and elementwise work with /usr/share/isched/site_probe.py, and keeps the record in probes/T.json beside the site catalogue; the static estimates of that node type then say "probed" instead of "assumed".`,
			Environment: append([][2]string{{"ISCHED_SITE", "site catalogue (default for --site)"}, {"SBATCH_*", "passed to sbatch unless the script sets the option"}}, redis...),
			Files: [][2]string{{"/etc/isched/site.json", "site catalogue example: partitions, node types, prices"},
				{"/usr/share/isched/isched/", "the Python package for training loops (progress, checkpoint requests, resume; Lightning and HF callbacks): PYTHONPATH=/usr/share/isched, import isched"},
				{"/usr/share/isched/model_summary.py", "writes model.json for estimate, plan and submit"},
				{"/etc/isched/probes/NODE-TYPE.json", "probe records of node types (isched site probe), read with the site catalogue beside them"},
				{"$XDG_DATA_HOME/isched/CLUSTER/profiled-receipts.jsonl", "the receipts isched profile keeps (default XDG_DATA_HOME: ~/.local/share)"}},
		},
		{
			Name: "isched-wrapper", Section: "1", Summary: "run a training command under isched and report what it does",
			Description: `isched-wrapper runs the training command as its child (srun isched-wrapper -- python train.py ...), measures its memory, CPU and GPU use, iteration times and checkpoints, reports them to Redis as the reporter user, relays Slurm's signals as checkpoint requests, and exits with the child's status. Its stdout is the child's; its own logs go to stderr.

With --send-spools it runs no command: it sends the reports this user's ended wrappers left undelivered (for a Slurm TaskEpilog, /usr/libexec/isched-task-epilog).`,
			Environment: append([][2]string{{"ISCHED_COORDINATOR_UID", "uid of the coordinator (the MUNGE credential is restricted to it)"},
				{"ISCHED_SPOOL_DIR", "where undelivered reports are spooled"}, {"ISCHED_LINEAGE", "lineage id (set by isched submit)"}}, redis...),
		},
		{
			Name: "isched-agent", Section: "8", Summary: "publish Slurm's state and execute the coordinator's actions",
			Description: `isched-agent is the only part of isched that changes Slurm jobs: it publishes the cluster's state (squeue, sinfo, scontrol) to Redis every poll and executes the coordinator's actions (requeue, hold, update, release, signal, submit) through the Slurm commands, without a shell. It runs as a service user that Slurm knows as an operator (isched-agent.service).

Exit status: 0 when stopped by SIGTERM, 1 when it could not run, 2 on a configuration error (which the unit does not restart). Under systemd it sends READY=1 once connected to Redis and feeds the watchdog from its poll loop.`,
			Environment: redis,
			Files:       [][2]string{{"/etc/isched/agent.env", "environment of isched-agent.service"}},
		},
		{
			Name: "isched-coordinator", Section: "8", Summary: "learn from running training jobs and decide checkpoints and migrations",
			Description: `isched-coordinator reads the wrappers' reports and the agent's snapshot from Redis, estimates each job's memory and end time, and decides checkpoints, continuations and migrations, which the agent executes. It opens the wrappers' MUNGE credentials (restricted to its uid: run it as a fixed system user, isched). Several may run; one leads. It serves Prometheus metrics on -metrics-listen. With -with-agent it also runs the agent in the same process.

Exit status: 0 when stopped by SIGTERM, 1 on a runtime failure, 2 on a configuration error (which the unit does not restart). Under systemd it sends READY=1 once connected and feeds the watchdog from its rounds.`,
			Environment: append([][2]string{{"ISCHED_COORDINATOR_CONFIG", "config file (default for -config)"}, {"ISCHED_AGENT_REDIS_PASSWORD_FILE", "the agent's password file under -with-agent"}}, redis...),
			Files: [][2]string{{"/etc/isched/coordinator.json", "policy: speed factors, margins, dev partitions"},
				{"/etc/isched/coordinator.env", "environment of isched-coordinator.service"}},
		},
		{
			Name: "isched-relay", Section: "8", Summary: "take the wrappers' reports over TCP and append them to Redis",
			Description: `isched-relay holds the reporter's Redis password so that jobs need none (the recommended setup; /usr/share/doc/isched/deployment.md). Wrappers (ISCHED_RELAY_ADDR) connect over TCP and prove their uid with a MUNGE credential restricted to the relay's uid (run it as the isched user, the coordinator's uid); the relay appends their signed reports to isched:CLUSTER:ingest only, with its own ids, its own approximate MAXLEN (derived from Redis's maxmemory, read with INFO memory at start and every 30 s, so that the stream at its worst, every entry 64 KiB, takes at most -stream-memory-fraction of it; a -max-len given above that is refused), at most 64 KiB a report and a per-uid ration of reports and bytes (a flooding uid is refused, never queued). It checks no report's contents: the coordinator does, as before. It bounds what a hostile client can hold: unauthenticated connections in all and per source (a uid on its own host, from the kernel's socket table, else an IP; when the pool is full a newcomer takes the place of the largest holder's oldest), and the memory of frames being read, in all and per uid; each kind of warning is logged a few times per 10 s and then summed up, while the metrics count every event.

Exit status: 0 when stopped by SIGTERM, 1 on a runtime failure, 2 on a configuration error (which the unit does not restart). Under systemd it sends READY=1 once listening and connected to Redis.`,
			Environment: append([][2]string{{"ISCHED_RELAY_LISTEN", "address to listen on (default for -listen)"}}, redis...),
			Files:       [][2]string{{"/etc/isched/relay.env", "environment of isched-relay.service"}},
		},
	}
}
