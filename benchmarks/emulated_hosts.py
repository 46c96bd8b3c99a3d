"""The hosts of a job in emulate.sh's network namespaces (PREFIX-h<i>), for the scripts that
watch one from the root namespace (link-usage.py, tcp-events.py)."""
import re
import subprocess
import time


def job_hosts():
    """{host index: [pids of the processes in it]} for emulate.sh's namespaces that hold one."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    hosts = {}
    for name in out.split():
        m = re.fullmatch(r".+-h(\d+)", name)
        if not m:
            continue
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                              text=True).stdout.split()
        if pids:
            hosts[int(m.group(1))] = pids
    return hosts


def wait_for_job(script, timeout_s=300):
    """job_hosts() once a bps-bench runs in them; exits naming `script` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-x", "bps-bench"], capture_output=True).returncode == 0:
            time.sleep(0.3)  # every host's processes have started
            hosts = job_hosts()
            if hosts:
                return hosts
        time.sleep(0.05)
    raise SystemExit(f"{script}: no job in emulated hosts within {timeout_s} s")
