"""A training loop stand-in for the site lab's test (stdlib only).

Prints where it runs (host name, the address it reaches the service host
from, the Slurm job), then `step N/T loss=...` every PERIOD seconds, and
ends at T. Usage: steps.py TOTAL PERIOD SERVICE_ADDR
"""
import os
import socket
import sys
import time

total, period, svc = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((svc, 9))  # UDP: no packet sent, only a route chosen
print("site-lab job: host %s addr %s job %s" % (socket.gethostname(), s.getsockname()[0],
                                               os.environ.get("SLURM_JOB_ID", "")), flush=True)
s.close()
for i in range(1, total + 1):
    time.sleep(period)
    print("step %d/%d loss=%.4f" % (i, total, 1.0 / i), flush=True)
