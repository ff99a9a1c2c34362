package wrapper

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// distEnv is the torch.distributed environment of one rank of a Slurm
// step (what torchrun gives its workers): RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT from SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, the step's tasks on this node, the step's
// first node and the job id. A script that calls
// init_process_group() with its default env:// then runs under
// `srun isched-wrapper` as under torchrun. Nothing for a step of one task;
// a variable the environment already sets (the user's, or torchrun's
// inside the wrapper) is left as it is: what the user says wins. The error
// names the Slurm variable that cannot be read.
func distEnv(getenv func(string) string) ([][2]string, error) {
	ntasks, err := strconv.Atoi(strings.TrimSpace(getenv("SLURM_NTASKS")))
	if err != nil || ntasks <= 1 {
		return nil, nil // not a step of several tasks (or not in one)
	}
	nodes := getenv("SLURM_STEP_NODELIST")
	if nodes == "" {
		nodes = getenv("SLURM_JOB_NODELIST")
	}
	master, err := firstHost(nodes)
	if err != nil {
		return nil, fmt.Errorf("SLURM_STEP_NODELIST %q: %w", nodes, err)
	}
	job, err := strconv.ParseUint(getenv("SLURM_JOB_ID"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("SLURM_JOB_ID %q: not a job id", getenv("SLURM_JOB_ID"))
	}
	local := getenv("SLURM_STEP_TASKS_PER_NODE")
	want := [][2]string{
		{"RANK", getenv("SLURM_PROCID")},
		{"WORLD_SIZE", strconv.Itoa(ntasks)},
		{"LOCAL_RANK", getenv("SLURM_LOCALID")},
		{"LOCAL_WORLD_SIZE", tasksHere(local, getenv("SLURM_NODEID"))},
		{"MASTER_ADDR", master},
		{"MASTER_PORT", strconv.FormatUint(masterPort(job), 10)},
	}
	var out [][2]string
	for _, kv := range want {
		if kv[1] != "" && getenv(kv[0]) == "" {
			out = append(out, kv)
		}
	}
	return out, nil
}

// masterPort is rank 0's port for a job: in 20000-39999, from the job id,
// so that two jobs sharing a node rarely pick the same one and every rank
// of a job picks the same.
func masterPort(job uint64) uint64 { return 20000 + job%20000 }

var hostRangeRE = regexp.MustCompile(`^([^\[,]+)\[([0-9]+)`)

// firstHost is the first host of a Slurm host list: "gpu[3-4,7],cpu1"
// is gpu3, "node[007-009]" node007, "login" login.
func firstHost(list string) (string, error) {
	list = strings.TrimSpace(list)
	if list == "" {
		return "", fmt.Errorf("empty host list")
	}
	if m := hostRangeRE.FindStringSubmatch(list); m != nil {
		return m[1] + m[2], nil
	}
	host, _, _ := strings.Cut(list, ",")
	if strings.ContainsAny(host, "[]") || host == "" {
		return "", fmt.Errorf("not a host list")
	}
	return host, nil
}

// tasksHere is this node's count in SLURM_STEP_TASKS_PER_NODE ("2(x3),1":
// two on each of the first three nodes, one on the fourth) for node
// index nodeID; "" when either cannot be read.
func tasksHere(perNode, nodeID string) string {
	id, err := strconv.Atoi(nodeID)
	if err != nil || id < 0 || perNode == "" {
		return ""
	}
	for _, part := range strings.Split(perNode, ",") {
		n, rep := part, 1
		if i := strings.Index(part, "(x"); i > 0 && strings.HasSuffix(part, ")") {
			r, err := strconv.Atoi(part[i+2 : len(part)-1])
			if err != nil || r <= 0 {
				return ""
			}
			n, rep = part[:i], r
		}
		if _, err := strconv.Atoi(n); err != nil {
			return ""
		}
		if id < rep {
			return n
		}
		id -= rep
	}
	return ""
}
